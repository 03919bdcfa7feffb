//! What an operator can do from the dashboard: retry a failed task (or make
//! a pending one due now), cancel a pending or running task, release a
//! failed one from its sequence, retry every
//! failed task of a kind. Each is a POST carrying the page's CSRF token, is
//! logged with who did it, and sends the operator back with what happened.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use ballast_queue::TaskState;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::session::Operator;
use super::Ui;

/// The fields of every action form.
#[derive(Deserialize)]
pub(super) struct ActionForm {
    csrf: String,
}

impl Ui {
    /// Whether a form carries this dashboard's CSRF token.
    fn genuine(&self, form: &ActionForm) -> bool {
        bool::from(self.0.csrf.as_bytes().ct_eq(form.csrf.as_bytes()))
    }

    /// The CSRF token forms carry.
    pub(super) fn csrf(&self) -> &str {
        &self.0.csrf
    }
}

fn forged() -> Response {
    (StatusCode::FORBIDDEN, "the form's CSRF token does not match: reload the page and try again\n")
        .into_response()
}

fn back_to(page: &str, said: &str) -> Response {
    let said: String = url_escape(said);
    Redirect::to(&format!("{page}?said={said}")).into_response()
}

/// `text` as a query value.
fn url_escape(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn queue_error(e: ballast_queue::Error) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, format!("the queue did not answer: {e}\n")).into_response()
}

/// A genuine action of a signed-in operator: the dashboard, who acts, and a
/// form whose CSRF token matches (a forged one is answered 403 before any
/// handler runs).
pub(super) struct Action {
    ui: Ui,
    operator: Operator,
}

impl FromRequest<Ui> for Action {
    type Rejection = Response;

    async fn from_request(request: Request, ui: &Ui) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let Extension(operator) = Extension::<Operator>::from_request_parts(&mut parts, ui)
            .await
            .map_err(IntoResponse::into_response)?;
        let Form(form) = Form::<ActionForm>::from_request(Request::from_parts(parts, body), ui)
            .await
            .map_err(IntoResponse::into_response)?;
        if !ui.genuine(&form) {
            return Err(forged());
        }
        Ok(Action { ui: ui.clone(), operator })
    }
}

impl Action {
    /// Done: the counts are refreshed soon and the operator goes back to
    /// `page` with what happened.
    fn done(&self, page: &str, said: &str) -> Response {
        self.ui.0.monitor.refresh_soon();
        back_to(page, said)
    }
}

pub(super) async fn retry(Path(id): Path<i64>, action: Action) -> Response {
    let queue = &action.ui.0.queue;
    let page = format!("/ui/tasks/{id}");
    let task = match queue.get(id).await {
        Ok(Some(task)) => task,
        Ok(None) => return back_to("/ui/tasks", &format!("no task {id}")),
        Err(e) => return queue_error(e),
    };
    let done = match task.state {
        TaskState::Failed => queue.retry(id).await,
        TaskState::Pending => queue.run_now(id).await,
        other => {
            return back_to(&page, &format!("task {id} is {other}: only failed or pending tasks are retried"))
        }
    };
    match done {
        Ok(true) => {
            tracing::info!(task_id = id, kind = %task.kind, who = %action.operator.0, "dashboard: task retried (was {})", task.state);
            action.done(&page, &format!("task {id} retried: pending, due now"))
        }
        Ok(false) => back_to(&page, &format!("task {id} changed meanwhile; nothing done")),
        Err(e) => queue_error(e),
    }
}

pub(super) async fn cancel(Path(id): Path<i64>, action: Action) -> Response {
    let page = format!("/ui/tasks/{id}");
    match action.ui.0.queue.cancel(id).await {
        Ok(true) => {
            tracing::info!(task_id = id, who = %action.operator.0, "dashboard: task cancelled");
            action.done(&page, &format!("task {id} cancelled"))
        }
        Ok(false) => back_to(&page, &format!("task {id} is already final; nothing done")),
        Err(e) => queue_error(e),
    }
}

/// Takes a failed task out of its sequence: the writes behind it go on.
pub(super) async fn release(Path(id): Path<i64>, action: Action) -> Response {
    let page = format!("/ui/tasks/{id}");
    match action.ui.0.queue.release_from_sequence(id).await {
        Ok(true) => {
            tracing::info!(task_id = id, who = %action.operator.0, "dashboard: failed task released from its sequence");
            action.done(&page, &format!("task {id} left its sequence: the writes behind it go on"))
        }
        Ok(false) => back_to(&page, &format!("task {id} is not a failed task of a sequence; nothing done")),
        Err(e) => queue_error(e),
    }
}

pub(super) async fn retry_failed(Path(kind): Path<String>, action: Action) -> Response {
    match action.ui.0.queue.retry_failed(&kind).await {
        Ok(n) => {
            tracing::info!(kind = %kind, retried = n, who = %action.operator.0, "dashboard: every failed task of a kind retried");
            action.done("/ui/", &format!("{n} failed task(s) of {kind} retried"))
        }
        Err(e) => queue_error(e),
    }
}
