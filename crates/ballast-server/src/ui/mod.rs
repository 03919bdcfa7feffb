//! The operator's window: a dashboard at `/ui/` on the admin listener.
//!
//! - **Overview**: per external system its breaker (and when it probes),
//!   attempts in flight against the bulkhead's limit, calls and attempts per
//!   second, the retry budget and the last error; the queue's tasks per kind
//!   and state and each kind's lag; each periodic task's schedule, next run
//!   and latest period's task (`ui/periodic.rs`). Counts refresh every few seconds with
//!   JavaScript, and the pages read the same without it.
//! - **Tasks**: filtered by kind and state, newest first, a page at a time;
//!   a task's page shows its payload, key, attempts, schedule, error history
//!   and lease.
//! - **Fleet**: the replicas on one PostgreSQL queue and, per system, the
//!   fleet's calls, 429s and breakers over the last 15 minutes, in `ui/fleet.rs`.
//! - **Actions**: retry or cancel a task, retry every failed task of a kind.
//!   Each is a POST form carrying the page's CSRF token, and is logged with
//!   who and when.
//!
//! Every asset is served by the binary; nothing comes from a CDN. Pages read
//! the queue through its admin API (parameterised queries). The overview
//! reads the queue monitor's snapshot, never the table, except each periodic
//! task's two latest periods, looked up by key and waited for 2 s at most.
//! Everything shown is HTML-escaped by the templates.

mod actions;
mod assets;
mod fleet;
mod pages;
mod periodic;
mod rates;
mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use ballast_http::Systems;
use ballast_queue::{Queue, QueueMonitor};
use tokio_util::sync::CancellationToken;

use crate::auth::Token;
use rates::Rates;
use session::Sessions;

/// How long a dashboard login lasts unless configured.
pub const DEFAULT_SESSION_TTL: Duration = ballast_config::DEFAULT_SESSION_TTL;

/// What every `/ui` answer tells the browser: scripts, styles and frames
/// only from the dashboard itself (no inline script), never framed, no
/// content sniffing, no `Referer` leaving it.
pub const BROWSER_HEADERS: [(&str, &str); 4] = [
    (
        "content-security-policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; \
         base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
];

async fn browser_headers(mut response: axum::response::Response) -> axum::response::Response {
    for (name, value) in BROWSER_HEADERS {
        response.headers_mut().insert(name, axum::http::HeaderValue::from_static(value));
    }
    response
}

/// 128 random bits from the thread's CSPRNG, in hex: a CSRF token or a
/// session id.
fn secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What the dashboard reads and acts on. Cheap to clone.
#[derive(Clone)]
pub struct Ui(Arc<UiState>);

struct UiState {
    systems: Systems,
    queue: Queue,
    monitor: QueueMonitor,
    rates: Rates,
    /// Every form carries it; a POST without it is refused (CSRF).
    csrf: String,
    sessions: Sessions,
    /// The token and the name of the variable it came from.
    token: Option<(Token, String)>,
    /// The fleet this replica is part of, and its own id.
    fleet: std::sync::OnceLock<(ballast_fleet::FleetView, uuid::Uuid)>,
    /// The periodic tasks the worker enqueues.
    periodic: std::sync::OnceLock<Vec<ballast_queue::Periodic>>,
    /// The listener speaks TLS: the session cookie is `Secure`.
    secure: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Ui {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ui").field("systems", &self.0.systems.names()).finish_non_exhaustive()
    }
}

impl Ui {
    /// A dashboard over `systems` and `queue` (acted on), with counts from
    /// `monitor`; with a `token` (and the name of its variable, for the log of
    /// actions) only operators who bring it get in, each login lasting
    /// `session_ttl` ([`DEFAULT_SESSION_TTL`] unless configured).
    pub fn new(
        systems: Systems,
        queue: Queue,
        monitor: QueueMonitor,
        token: Option<(Token, String)>,
        session_ttl: Duration,
    ) -> Self {
        let csrf = secret();
        Self(Arc::new(UiState {
            rates: Rates::new(&systems),
            systems,
            queue,
            monitor,
            csrf,
            sessions: Sessions::new(session_ttl),
            token,
            fleet: std::sync::OnceLock::new(),
            periodic: std::sync::OnceLock::new(),
            secure: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Marks the session cookie `Secure`, for a dashboard served over TLS
    /// (`[serve] tls_cert_file`): a browser then never sends it in clear.
    pub fn secure_cookies(self, secure: bool) -> Self {
        self.0.secure.store(secure, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// `; Secure` when the cookie is, else nothing.
    fn secure_attribute(&self) -> &'static str {
        if self.0.secure.load(std::sync::atomic::Ordering::Relaxed) {
            "; Secure"
        } else {
            ""
        }
    }

    /// Shows `fleet` (a view of it, and this replica's id) on the Fleet page.
    pub fn fleet(self, fleet: Option<(ballast_fleet::FleetView, uuid::Uuid)>) -> Self {
        if let Some(fleet) = fleet {
            // Set once, when the dashboard is made.
            let _ = self.0.fleet.set(fleet);
        }
        self
    }

    /// Shows `periodic` (the tasks the worker enqueues each period) on the
    /// overview.
    pub fn periodic(self, periodic: Vec<ballast_queue::Periodic>) -> Self {
        // Set once, when the dashboard is made.
        let _ = self.0.periodic.set(periodic);
        self
    }

    /// Samples the systems' totals for the calls/s and attempts/s columns
    /// until `stop` is cancelled; run it beside the router.
    pub async fn sample_rates(self, stop: CancellationToken) {
        self.0.rates.run(self.0.systems.clone(), stop).await;
    }

    /// The routes under `/ui/`.
    pub fn router(self) -> Router {
        let pages = Router::new()
            .route("/ui/", get(pages::overview))
            .route("/ui/live", get(pages::live))
            .route("/ui/tasks", get(pages::tasks))
            .route("/ui/tasks/{id}", get(pages::task))
            .route("/ui/fleet", get(fleet::page))
            .route("/ui/tasks/{id}/retry", post(actions::retry))
            .route("/ui/tasks/{id}/cancel", post(actions::cancel))
            .route("/ui/tasks/{id}/release", post(actions::release))
            .route("/ui/kinds/{kind}/retry-failed", post(actions::retry_failed))
            .route("/ui/logout", post(session::logout))
            .route_layer(axum::middleware::from_fn_with_state(self.clone(), session::require));
        Router::new()
            .merge(pages)
            .route("/ui", get(|| async { axum::response::Redirect::permanent("/ui/") }))
            .route("/ui/login", get(session::login_form).post(session::login))
            .route("/ui/assets/{file}", get(assets::serve))
            .layer(axum::middleware::from_fn(crate::origin::same_origin_actions))
            .layer(axum::middleware::map_response(browser_headers))
            .with_state(self)
    }
}
