//! `GET /tasks/{handle}`: where a deferred write stands — its state, attempts,
//! last error and, once delivered, the upstream's final status.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ballast_http::{Delivery, DELIVERY_KIND};
use serde::Serialize;

use super::problem::{Problem, Reason};
use super::Gateway;

/// The body of `GET /tasks/{handle}`.
#[derive(Debug, Serialize)]
struct TaskView {
    /// The handle it was asked by (what the 202's `task_id` said).
    task_id: String,
    system: Option<String>,
    state: &'static str,
    attempts: u32,
    max_attempts: u32,
    last_error: Option<String>,
    /// When it is (or was) due, seconds since the Unix epoch.
    run_at: f64,
    /// The upstream's answer to the attempt that delivered it:
    /// `{"status": 201}` ([`ballast_http::DeliveryResult`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<serde_json::Value>,
}

pub(super) async fn task(State(gateway): State<Gateway>, Path(id): Path<String>) -> Response {
    let not_found = || {
        let detail = format!(
            "no deferred write {id:?}: a deferred write is named by the handle its 202 gave in Location \
             (/tasks/{{handle}}), not by a task id"
        );
        Problem::new(Reason::NotFound, detail).into_response()
    };
    let Some(task_id) = Delivery::handle_id(&id) else { return not_found() };
    let task = match gateway.queue().get(task_id).await {
        Ok(Some(task)) if task.kind == DELIVERY_KIND && Delivery::opens(&id, &task.payload) => task,
        Ok(_) => return not_found(),
        Err(e) => {
            let detail = format!("cannot read the queue: {e}");
            return Problem::new(Reason::QueueUnavailable, detail).into_response();
        }
    };
    let seconds =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    Json(TaskView {
        task_id: id.clone(),
        system: task.payload.get("system").and_then(|s| s.as_str()).map(str::to_owned),
        state: task.state.as_str(),
        attempts: task.attempt,
        max_attempts: task.max_attempts,
        last_error: task.last_error.clone(),
        run_at: seconds(task.run_at),
        result: task.result.clone(),
    })
    .into_response()
}
