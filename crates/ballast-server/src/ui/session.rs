//! Who may use the dashboard: everyone who reaches a loopback listener;
//! beyond loopback, operators who bring the token — as
//! `Authorization: Bearer`, or once through the login form, which sets an
//! `HttpOnly`, `SameSite=Strict` session cookie.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use axum::extract::{Request, State};
use axum::http::header::{COOKIE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::{pages, secret, Ui};

/// The session cookie's name.
const COOKIE_NAME: &str = "ballast_session";

/// The sessions opened through the login form, in memory: a restart logs
/// everyone out.
#[derive(Default)]
pub(super) struct Sessions(Mutex<HashSet<String>>);

impl Sessions {
    fn open(&self) -> String {
        let id = secret();
        self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone());
        id
    }

    fn contains(&self, id: &str) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).contains(id)
    }

    fn close(&self, id: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
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

pub(super) async fn login(State(ui): State<Ui>, Form(form): Form<Login>) -> Response {
    let Some((token, name)) = &ui.0.token else { return Redirect::to("/ui/").into_response() };
    if !token.matches(form.token.as_bytes()) {
        tracing::warn!("dashboard login refused: the token does not match {name}");
        let page = pages::login(Some("That is not the token."));
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    let id = ui.0.sessions.open();
    tracing::info!("dashboard login with {name}");
    let cookie = format!("{COOKIE_NAME}={id}; Path=/ui; HttpOnly; SameSite=Strict");
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
