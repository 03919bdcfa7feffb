//! `ballast serve --config FILE`: the durable worker that delivers deferred
//! writes to the configured HTTP systems, with Prometheus metrics and
//! liveness/readiness endpoints.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use ballast_config::{report, Config};
use ballast_http::{DeliveryHandler, Health, DELIVERY_KIND};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;

/// How often the Prometheus recorder drains its histograms when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Arguments of `ballast serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file: its systems receive the deliveries, its
    /// [queue] holds them.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Where to serve /metrics and /health (port 0 picks a free port). Loopback
    /// by default: expose it deliberately.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    listen: SocketAddr,
}

/// What the endpoints read.
#[derive(Clone)]
struct Endpoints {
    prometheus: PrometheusHandle,
    health: Health,
    queue: ballast_queue::Queue,
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
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(&config, args.listen))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve(config: &Config, listen: SocketAddr) -> anyhow::Result<()> {
    // Before the systems are built: metric handles taken earlier record nowhere.
    let prometheus =
        PrometheusBuilder::new().install_recorder().context("cannot install the Prometheus recorder")?;
    ballast_http::metrics::describe();
    let systems = config.http_systems()?;
    let settings = config.queue()?;
    let shown = crate::queue::redact(&settings.url);
    let queue = settings.connect().await.with_context(|| format!("cannot open the queue at {shown}"))?;
    queue.migrate().await.with_context(|| format!("cannot prepare the queue table at {shown}"))?;
    let worker = settings
        .worker(queue.clone())
        .handler(DELIVERY_KIND, DeliveryHandler::new(systems.iter().cloned()))
        .build()?;

    let endpoints =
        Endpoints { prometheus: prometheus.clone(), health: Health::from_systems(&systems), queue };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .with_state(endpoints);
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    println!(
        "ballast serve: listening on http://{addr} (metrics /metrics, health /health/live /health/ready), \
         {} systems, queue {shown}",
        systems.len()
    );
    // Whoever started us may wait for this line before talking to us.
    std::io::stdout().flush()?;

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    tokio::spawn(upkeep(prometheus, shutdown.clone()));
    let worker = tokio::spawn(worker.run(shutdown.clone()));
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).await;
    // The server can only stop early on an I/O error; the worker must still stop cleanly.
    shutdown.cancel();
    let summary = worker.await.context("the worker panicked")?;
    served.context("the HTTP server failed")?;
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

async fn upkeep(prometheus: PrometheusHandle, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(UPKEEP_EVERY);
    while shutdown.run_until_cancelled(every.tick()).await.is_some() {
        prometheus.run_upkeep();
    }
}

async fn metrics(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    // The queue gauges (tasks per state, lag) come from one query per scrape.
    if let Err(e) = endpoints.queue.record_metrics().await {
        tracing::warn!(error = %e, "cannot refresh the queue metrics");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], endpoints.prometheus.render())
}

/// Always 200 while the process runs: an outage of an external system must
/// not get this service restarted.
async fn live() -> &'static str {
    "live\n"
}

/// 200 unless a critical system's breaker is open; the body says which.
async fn ready(State(endpoints): State<Endpoints>) -> impl IntoResponse {
    let report = endpoints.health.report();
    let status = if report.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(report))
}
