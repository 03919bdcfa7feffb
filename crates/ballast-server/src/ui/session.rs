//! Who may use the dashboard: everyone who reaches a loopback listener;
//! beyond loopback, operators who bring the token — as
//! `Authorization: Bearer`, or once through the login form, which sets an
//! `HttpOnly`, `SameSite=Strict` session cookie that lasts `[serve]
//! session_ttl` (12 h by default), on the server as in the cookie's `Max-Age`.
//!
//! Both ways are checked by the token itself ([`Token::check`]), throttled
//! per address and per listener like every other check of the admin
//! listener's token ([`crate::auth`]): a token cannot be guessed at
//! thousands of tries a second, from one address or from many.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::extract::{Request, State};
use axum::http::header::{COOKIE, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use crate::auth::Check;

use super::{pages, secret, Ui};

/// The session cookie's name.
const COOKIE_NAME: &str = "ballast_session";

/// The sessions opened through the login form, each until it expires, in
/// memory: a restart logs everyone out.
pub(super) struct Sessions {
    open: Mutex<HashMap<String, Instant>>,
    ttl: Duration,
}

impl Sessions {
    pub(super) fn new(ttl: Duration) -> Self {
        Self { open: Mutex::default(), ttl }
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
    let check = match &ui.0.token {
        None => Check::Admitted,
        Some(_) if session_id(request.headers()).is_some_and(|id| ui.0.sessions.contains(id)) => {
            Check::Admitted
        }
        Some((token, _)) => token.check_bearer(request.headers(), crate::auth::peer(&request)),
    };
    match check {
        Check::Admitted => {
            let operator = match &ui.0.token {
                None => Operator("an operator on loopback".to_owned()),
                Some((_, name)) => Operator(format!("the holder of {name}")),
            };
            request.extensions_mut().insert(operator);
            next.run(request).await
        }
        Check::Throttled(wait) => throttled(wait, None),
        Check::Refused if request.method() == axum::http::Method::GET => {
            Redirect::to("/ui/login").into_response()
        }
        Check::Refused => (StatusCode::UNAUTHORIZED, "log in at /ui/login first\n").into_response(),
    }
}

/// 429 with `Retry-After`: too many wrong tokens lately.
fn throttled(wait: Duration, peer: Option<std::net::IpAddr>) -> Response {
    let secs = wait.as_secs().max(1);
    let from = peer.map(|p| format!(" from {p}")).unwrap_or_default();
    let page = pages::login(Some(&format!(
        "Too many wrong tokens lately{from} or at this listener; try again in {secs} s."
    )));
    (StatusCode::TOO_MANY_REQUESTS, [(RETRY_AFTER, secs.to_string())], page).into_response()
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
    // elsewhere without it is throttled as one unknown address.
    let peer = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    match token.check(Some(form.token.as_bytes()), peer) {
        Check::Admitted => {}
        Check::Throttled(wait) => return throttled(wait, peer),
        Check::Refused => {
            tracing::debug!(?peer, "dashboard login refused: the token does not match {name}");
            let page = pages::login(Some("That is not the token."));
            return (StatusCode::UNAUTHORIZED, page).into_response();
        }
    }
    let id = ui.0.sessions.open();
    tracing::info!(?peer, "dashboard login with {name}");
    let max_age = ui.0.sessions.ttl.as_secs();
    let secure = ui.secure_attribute();
    let cookie =
        format!("{COOKIE_NAME}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
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
    let secure = ui.secure_attribute();
    let expired = format!("{COOKIE_NAME}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}");
    ([(SET_COOKIE, expired)], Redirect::to("/ui/login")).into_response()
}
