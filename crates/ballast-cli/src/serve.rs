//! `ballast serve --config FILE`: the durable worker that delivers deferred
//! writes to the configured HTTP systems, with Prometheus metrics and
//! liveness/readiness endpoints.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use ballast_config::{report, Config};
use ballast_server::Server;
use tokio_util::sync::CancellationToken;

/// Arguments of `ballast serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file: its systems receive the deliveries, its
    /// `[queue]` holds them, its `[serve]` says how to listen.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Where to serve /metrics and /health (port 0 picks a free port);
    /// overrides [serve] listen. Loopback by default: expose it deliberately.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let config = match Config::load(&args.config) {
        Ok(config) => config,
        Err(e) => {
            eprint!("{}", report::human(&e.findings(), e.input()));
            return Ok(ExitCode::from(crate::EXIT_UNUSABLE));
        }
    };
    let findings = config.lint();
    if !findings.is_empty() {
        eprint!("{}", report::human(&findings, Some(config.source())));
        eprintln!("{}", report::summary(&args.config.display().to_string(), &findings));
    }
    if ballast_config::has_errors(&findings) {
        eprintln!("ballast serve: not started: the configuration has errors");
        return Ok(ExitCode::from(1));
    }
    ballast_server::telemetry::init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(&config, args.listen))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(config: &Config, listen: Option<SocketAddr>) -> anyhow::Result<()> {
    // Before the systems are built: metric handles taken earlier record nowhere.
    let prometheus =
        ballast_server::admin::install_recorder().context("cannot install the Prometheus recorder")?;
    let server = Server::bind(config, prometheus, listen).await?;
    println!(
        "ballast serve: listening on http://{} (metrics /metrics, health /health/live /health/ready), \
         {} systems, queue {}",
        server.admin_addr(),
        server.systems().names().len(),
        server.queue_url()
    );
    if let Some(gateway) = server.gateway_addr() {
        println!("ballast serve: gateway on http://{gateway} (/call/{{system}}/{{path}}, /tasks/{{id}})");
    }
    // Whoever started us may wait for this line before talking to us.
    std::io::stdout().flush()?;

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let summary = server.run(shutdown).await?;
    eprintln!(
        "ballast serve: stopped; {} delivered, {} rescheduled, {} failed, {} released to other workers",
        summary.completed, summary.rescheduled, summary.failed, summary.released
    );
    Ok(())
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C.
async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; stop with Ctrl-C");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down: finishing or releasing in-flight deliveries");
    shutdown.cancel();
}
