//! `ballast serve --config FILE`: the durable worker that delivers deferred
//! writes to the configured HTTP systems, with Prometheus metrics and
//! liveness/readiness endpoints.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ballast_config::{report, Config, ResolvedTelemetry};
use ballast_server::Server;
use tokio_util::sync::CancellationToken;

/// Arguments of `ballast serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The configuration file: its systems receive the deliveries, its
    /// `[queue]` holds them, its `[serve]` says how to listen.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Where to serve /metrics and /health (port 0 picks a free port);
    /// overrides [serve] listen. Loopback by default: expose it deliberately.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
}

pub fn run(args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let config = match crate::load_config(&args.config) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    // Notes are for `ballast lint`: a start says only what is wrong or advised against.
    let findings: Vec<_> =
        config.lint().into_iter().filter(|f| f.severity != ballast::Severity::Note).collect();
    if !findings.is_empty() {
        eprint!("{}", report::human(&findings, Some(config.source())));
        eprintln!("{}", report::summary(&args.config.display().to_string(), &findings));
    }
    if ballast_config::has_errors(&findings) {
        eprintln!("ballast serve: not started: the configuration has errors");
        return Ok(ExitCode::from(1));
    }
    // The standard OTEL_* variables over [telemetry], checked before anything starts.
    let telemetry = config.telemetry()?.resolve(|var| std::env::var(var).ok());
    let telemetry = match telemetry {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("ballast serve: not started: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(&config, args.listen, telemetry))?;
    Ok(ExitCode::SUCCESS)
}

/// How long spans still queued at exit may take to reach the collector.
const TRACE_FLUSH: Duration = Duration::from_secs(5);

async fn serve(config: &Config, listen: Option<SocketAddr>, traces: ResolvedTelemetry) -> anyhow::Result<()> {
    // Before the systems and the exporter: metric handles taken earlier record nowhere.
    let prometheus =
        ballast_server::admin::install_recorder().context("cannot install the Prometheus recorder")?;
    let telemetry = ballast_server::telemetry::init(traces.export.as_ref())?;
    for warning in &traces.warnings {
        tracing::warn!("{warning}");
    }
    let server = Server::bind(config, prometheus, listen).await?;
    println!(
        "ballast serve: listening on {} (metrics /metrics, health /health/live /health/ready), \
         {} systems, queue {}",
        server.admin_url(),
        server.systems().names().len(),
        server.queue_url()
    );
    if let Some(gateway) = server.gateway_url() {
        println!("ballast serve: gateway on {gateway} (/call/{{system}}/{{path}}, /tasks/{{id}})");
    }
    if let Some(export) = &traces.export {
        println!(
            "ballast serve: traces to {} (OTLP/HTTP, sampler {}, service.name {})",
            ballast::redact_url(&export.endpoint),
            export.spans.sampler,
            export.spans.service_name
        );
    }
    // Whoever started us may wait for this line before talking to us.
    std::io::stdout().flush()?;

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let drain = server.drain().clone();
    let summary = server.run(shutdown).await;
    telemetry.shutdown(TRACE_FLUSH).await;
    let summary = summary?;
    eprintln!("ballast serve: {}", drain.summary());
    eprintln!(
        "ballast serve: stopped; {} delivered, {} rescheduled, {} failed, {} released to other workers",
        summary.completed, summary.rescheduled, summary.failed, summary.released
    );
    Ok(())
}

/// Cancels `shutdown` — the drain begins — on SIGTERM or Ctrl-C.
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
    tracing::info!(
        "shutting down: draining (readiness fails now; the listeners serve on for [serve] drain_delay)"
    );
    shutdown.cancel();
}
