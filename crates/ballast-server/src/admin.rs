//! The admin listener's routes: Prometheus metrics, liveness and readiness,
//! and `POST /admin/drain`, which begins the drain a SIGTERM would
//! ([`crate::drain`]).
//!
//! Nothing here touches the database: the queue's counts and reachability
//! come from a [`QueueMonitor`] snapshot refreshed in the background, so a
//! scrape answers at once even while the database hangs, and twenty
//! scrapers at once cost the deliveries nothing.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use ballast_http::{Health, HealthReport, SystemHealth, Systems};
use ballast_queue::QueueMonitor;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;

use crate::auth::{Check, Token};

/// Installs the global Prometheus recorder `ballast serve` records into,
/// with call durations as a histogram
/// ([`CALL_DURATION_BUCKETS`](ballast_http::metrics::CALL_DURATION_BUCKETS))
/// rather than the exporter's default summary: a summary's quantiles cannot
/// be combined over instances, and the dashboard in `examples/monitoring`
/// reads `ballast_call_duration_seconds_bucket`. Install it before building
/// any system: metric handles taken earlier record nowhere.
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("ballast_call_duration_seconds".to_owned()),
            &ballast_http::metrics::CALL_DURATION_BUCKETS,
        )?
        .install_recorder()
}

/// What the admin routes read.
#[derive(Clone)]
pub struct Admin {
    prometheus: PrometheusHandle,
    systems: Systems,
    monitor: QueueMonitor,
    /// Asked of scrapers and probes too, when set.
    token: Option<Token>,
    /// The process's drain: readiness fails once it begins.
    drain: crate::drain::Drain,
    /// The listener's token, which `/admin/drain` always asks for.
    drain_token: Option<Token>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("systems", &self.systems.names())
            .field("monitor", &self.monitor)
            .finish()
    }
}

/// The body of `/health/ready`.
///
/// Readiness is the gateway's own: its queue database answers and stores.
/// An external system's outage does not make it unready — the gateway
/// still accepts and defers the writes meant for it, and every replica
/// going unready at once would turn one system's outage into the app's.
/// Each system's [`SystemStatus`](ballast_http::SystemStatus) is reported
/// beside it, and on `/health/systems`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Readiness {
    /// The queue database answers and stores.
    pub ready: bool,
    /// The process is draining (a deploy, a SIGTERM): load balancers should
    /// send elsewhere; calls already here are still served.
    pub draining: bool,
    /// Each external system: its status and breaker (not part of `ready`).
    pub systems: Vec<SystemHealth>,
    /// The queue database, as the monitor last saw it.
    pub queue: QueueHealth,
}

/// The queue part of [`Readiness`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueHealth {
    /// Whether the last refresh of the queue's counts reached the database.
    pub reachable: bool,
    /// Why it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds since the Unix epoch of that refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<f64>,
    /// Why the queue cannot store a task (a full disk, a removed file), if
    /// it cannot: deferred writes would be refused or lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_error: Option<String>,
}

impl Admin {
    /// Routes reading `prometheus` (already installed as the recorder),
    /// `systems` (their breakers, as they are after any reload) and
    /// `monitor` (the queue).
    pub fn new(prometheus: PrometheusHandle, systems: Systems, monitor: QueueMonitor) -> Self {
        Self {
            prometheus,
            systems,
            monitor,
            token: None,
            drain: crate::drain::Drain::default(),
            drain_token: None,
        }
    }

    /// Follows `drain`: readiness answers 503 once it begins, and `POST
    /// /admin/drain` begins it, asking for `token` when the listener has one.
    pub fn drain(mut self, drain: crate::drain::Drain, token: Option<Token>) -> Self {
        self.drain = drain;
        self.drain_token = token;
        self
    }

    /// Asks `/metrics` and `/health/*` for `token` (`Authorization: Bearer`).
    pub fn protected(mut self, token: Token) -> Self {
        self.token = Some(token);
        self
    }

    /// `/metrics`, `/health/live`, `/health/ready` and `/health/systems`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/metrics", get(metrics))
            .route("/health/live", get(live))
            .route("/health/ready", get(ready))
            .route("/health/systems", get(systems))
            .route_layer(axum::middleware::from_fn_with_state(self.clone(), admit))
            .route("/admin/drain", axum::routing::post(drain))
            .with_state(self)
    }

    /// The readiness report, as `/health/ready` serves it.
    pub fn readiness(&self) -> Readiness {
        let systems = Health::from_systems(&self.systems.all()).report();
        let snapshot = self.monitor.snapshot();
        let queue = QueueHealth {
            reachable: snapshot.reachable,
            error: snapshot.error.clone(),
            checked_at: snapshot.checked_at.map(seconds),
            storage_error: snapshot.storage_error.clone(),
        };
        let draining = self.drain.is_draining();
        let ready = queue.reachable && queue.storage_error.is_none() && !draining;
        Readiness { ready, draining, systems: systems.systems, queue }
    }

    /// Each external system's status, as `/health/systems` serves it, and
    /// whether a critical one is unavailable.
    pub fn systems(&self) -> (HealthReport, bool) {
        let health = Health::from_systems(&self.systems.all());
        (health.report(), health.critical_unavailable())
    }
}

fn seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Lets a scrape or probe through unless a token is asked and missing.
async fn admit(
    State(admin): State<Admin>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    match admin.token.as_ref().map(|t| t.check_bearer(request.headers(), crate::auth::peer(&request))) {
        Some(Check::Refused) => {
            (StatusCode::UNAUTHORIZED, "this endpoint asks for `Authorization: Bearer <token>`\n")
                .into_response()
        }
        Some(Check::Throttled(wait)) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, wait.as_secs().max(1).to_string())],
            "too many wrong tokens lately; try again later\n",
        )
            .into_response(),
        Some(Check::Admitted) | None => next.run(request).await,
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], admin.prometheus.render())
}

/// Always 200 while the process runs: an outage of an external system or of
/// the database must not get this service restarted.
async fn live() -> &'static str {
    "live\n"
}

/// 200 when ready, 503 while the queue database does not answer, the
/// queue cannot store a task (a full disk, a removed SQLite file) or the
/// process drains; the body says which, and how each external system is.
async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    let report = admin.readiness();
    let status = if report.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(report))
}

/// Begins the drain (`202`, the drain's phase in the body); the listener's
/// token is asked for when it has one, and a request a browser marks as
/// another site's is refused.
async fn drain(State(admin): State<Admin>, request: axum::extract::Request) -> axum::response::Response {
    if let Some(refused) = crate::origin::from_another_site(request.headers()) {
        return refused;
    }
    match admin.drain_token.as_ref().map(|t| t.check_bearer(request.headers(), crate::auth::peer(&request))) {
        Some(Check::Refused) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "draining asks for `Authorization: Bearer <token>`\n",
            )
                .into_response()
        }
        Some(Check::Throttled(wait)) => {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, wait.as_secs().max(1).to_string())],
                "too many wrong tokens lately; try again later\n",
            )
                .into_response()
        }
        Some(Check::Admitted) | None => {}
    }
    let began = admin.drain.begin();
    if began {
        tracing::info!("drain asked for on /admin/drain");
    }
    let body = serde_json::json!({ "draining": true, "began_now": began, "phase": format!("{:?}", admin.drain.phase()).to_lowercase() });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// Each external system `up`, `degraded` or `unavailable`: 503 while a
/// system configured `critical = true` is unavailable, 200 otherwise. An
/// app that cannot work without such a system — one whose calls cannot be
/// deferred — points its readiness probe here.
async fn systems(State(admin): State<Admin>) -> impl IntoResponse {
    let (report, down) = admin.systems();
    let status = if down { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
    (status, Json(serde_json::json!({ "status": report.status, "systems": report.systems })))
}
