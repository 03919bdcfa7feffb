//! Who may use the dashboard: everyone who reaches a loopback listener;
//! beyond loopback, operators who bring the token — as
//! `Authorization: Bearer`, or once through the login form, which sets an
//! `HttpOnly`, `SameSite=Strict` session cookie that lasts `[serve]
//! session_ttl` (12 h by default), on the server as in the cookie's `Max-Age`.
//!
//! Logins are rate limited per peer address (governor's GCRA: a burst of
//! [`LOGIN_BURST`], then one every [`LOGIN_EVERY`]), so a token cannot be
//! guessed at thousands of tries a second; each refused login is counted in
//! `ballast_ui_login_failures_total`, not logged line by line.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use governor::{DefaultKeyedRateLimiter, Quota};

use axum::extract::{Request, State};
use axum::http::header::{COOKIE, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::{pages, secret, Ui};

/// The session cookie's name.
const COOKIE_NAME: &str = "ballast_session";

/// Logins a peer may try at once.
pub const LOGIN_BURST: u32 = 5;

/// How often a peer may try again once its burst is spent.
pub const LOGIN_EVERY: Duration = Duration::from_secs(6);

/// The counter of refused dashboard logins.
pub const LOGIN_FAILURES: &str = "ballast_ui_login_failures_total";

/// The sessions opened through the login form, each until it expires, in
/// memory: a restart logs everyone out.
pub(super) struct Sessions {
    open: Mutex<HashMap<String, Instant>>,
    ttl: Duration,
    logins: DefaultKeyedRateLimiter<IpAddr>,
}

impl Sessions {
    pub(super) fn new(ttl: Duration) -> Self {
        let quota = Quota::with_period(LOGIN_EVERY)
            .expect("a period above zero")
            .allow_burst(NonZeroU32::new(LOGIN_BURST).expect("a burst above zero"));
        Self { open: Mutex::default(), ttl, logins: DefaultKeyedRateLimiter::keyed(quota) }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open(&self) -> String {
        let id = secret();
        let now = Instant::now();
        let mut open = self.sessions();
        open.retain(|_, expires| *expires > now);
        open.insert(id.clone(), now + self.ttl);
        id
    }

    fn contains(&self, id: &str) -> bool {
        self.sessions().get(id).is_some_and(|expires| *expires > Instant::now())
    }

    fn close(&self, id: &str) {
        self.sessions().remove(id);
    }

    /// Whether `peer` may try a login now; else how long until it may.
    fn may_try(&self, peer: IpAddr) -> Result<(), Duration> {
        self.logins.retain_recent();
        self.logins.check_key(&peer).map_err(|not_until| {
            not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()))
        })
    }
}

/// Who made a request, for the log of actions.
#[derive(Debug, Clone)]
pub(super) struct Operator(pub String);

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE_NAME)?.strip_prefix('='))
}

/// Lets a request in, marked with who it is, or sends it to the login form.
pub(super) async fn require(State(ui): State<Ui>, mut request: Request, next: Next) -> Response {
    let operator = match &ui.0.token {
        None => Some(Operator("an operator on loopback".to_owned())),
        Some((token, name)) => {
            let by_session = session_id(request.headers()).is_some_and(|id| ui.0.sessions.contains(id));
            (by_session || token.admits(request.headers())).then(|| Operator(format!("the holder of {name}")))
        }
    };
    match operator {
        Some(operator) => {
            request.extensions_mut().insert(operator);
            next.run(request).await
        }
        None if request.method() == axum::http::Method::GET => Redirect::to("/ui/login").into_response(),
        None => (StatusCode::UNAUTHORIZED, "log in at /ui/login first\n").into_response(),
    }
}

/// The login form's fields.
#[derive(Deserialize)]
pub(super) struct Login {
    token: String,
}

pub(super) async fn login_form() -> Response {
    pages::login(None).into_response()
}

pub(super) async fn login(
    State(ui): State<Ui>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Form(form): Form<Login>,
) -> Response {
    let Some((token, name)) = &ui.0.token else { return Redirect::to("/ui/").into_response() };
    // The listener records every connection's peer; a router mounted
    // elsewhere without it shares one limit.
    let peer = peer.map_or(IpAddr::from([0, 0, 0, 0]), |Extension(ConnectInfo(addr))| addr.ip());
    if let Err(wait) = ui.0.sessions.may_try(peer) {
        metrics::counter!(LOGIN_FAILURES, "reason" => "rate_limited").increment(1);
        let secs = wait.as_secs().max(1);
        let page = pages::login(Some(&format!("Too many tries from {peer}; try again in {secs} s.")));
        return (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, secs.to_string())], page).into_response();
    }
    if !token.matches(form.token.as_bytes()) {
        metrics::counter!(LOGIN_FAILURES, "reason" => "wrong_token").increment(1);
        tracing::debug!(%peer, "dashboard login refused: the token does not match {name}");
        let page = pages::login(Some("That is not the token."));
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    let id = ui.0.sessions.open();
    tracing::info!(%peer, "dashboard login with {name}");
    let max_age = ui.0.sessions.ttl.as_secs();
    let cookie = format!("{COOKIE_NAME}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}");
    ([(SET_COOKIE, cookie)], Redirect::to("/ui/")).into_response()
}

pub(super) async fn logout(
    State(ui): State<Ui>,
    Extension(operator): Extension<Operator>,
    headers: HeaderMap,
) -> Response {
    if let Some(id) = session_id(&headers) {
        ui.0.sessions.close(id);
    }
    tracing::info!(who = %operator.0, "dashboard logout");
    let expired = format!("{COOKIE_NAME}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(SET_COOKIE, expired)], Redirect::to("/ui/login")).into_response()
}
