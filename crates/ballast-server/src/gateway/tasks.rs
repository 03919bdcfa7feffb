//! `GET /tasks/{handle}`: where a deferred write stands — its state, why it
//! was deferred, when it is tried next and, once delivered, the upstream's
//! answer ([`TaskView`]). With `?wait=30s` the answer waits until the task
//! ends or the wait is over ([`super::waiters`]).

use std::time::Duration;

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ballast_http::{is_delivery_kind, Delivery, TaskView};
use ballast_queue::TaskInfo;
use serde::Deserialize;

use super::problem::{Problem, Reason};
use super::waiters::{parse_wait, Full, MAX_WAIT, PER_HANDLE};
use super::Gateway;

/// `?wait=`: how long to hold the answer for the task to end.
#[derive(Debug, Deserialize)]
pub(super) struct Wait {
    wait: Option<String>,
}

pub(super) async fn task(
    State(gateway): State<Gateway>,
    Path(handle): Path<String>,
    Query(wait): Query<Wait>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
) -> Response {
    let wait = match wait.wait.as_deref().map(|w| (w, parse_wait(w))) {
        None => None,
        Some((_, Some(wait))) => Some(wait.min(MAX_WAIT)),
        Some((text, None)) => {
            let detail = format!(
                "wait={text:?} is not a duration: write seconds (`30`, `30s`), `1500ms` or `1m`; at most {}s",
                MAX_WAIT.as_secs()
            );
            return Problem::new(Reason::BadRequest, detail).into_response();
        }
    };
    let Some(task_id) = Delivery::handle_id(&handle) else { return not_found(&handle) };
    let Some(wait) = wait.filter(|w| !w.is_zero()) else {
        return match read(&gateway, &handle, task_id).await {
            Ok(task) => view(&gateway, &handle, &task),
            Err(response) => response,
        };
    };
    let until = tokio::time::Instant::now() + wait;
    let client = crate::auth::peer_key(peer.map(|axum::Extension(ConnectInfo(addr))| addr.ip()));
    loop {
        // The place is taken before the read: an end in between still wakes it.
        let mut ticket = match gateway.waiters().wait(task_id, client) {
            Ok(ticket) => ticket,
            Err(full) => {
                let detail = match full {
                    Full::Listener => "this listener holds as many waiting callers as it takes \
                                       ([gateway] max_waiters); ask again later, or without wait="
                        .to_owned(),
                    Full::Client(held) => format!(
                        "your address holds {held} waiting callers, and the places left (a quarter of \
                         [gateway] max_waiters) are kept for other callers; ask again later, or without wait="
                    ),
                    Full::Handle => format!(
                        "{PER_HANDLE} callers wait on this task already, the most one task takes; \
                         ask again later, or without wait="
                    ),
                };
                return Problem::new(Reason::TooManyWaiters, detail)
                    .retry_after(Duration::from_secs(1))
                    .into_response();
            }
        };
        let task = match read(&gateway, &handle, task_id).await {
            Ok(task) => task,
            Err(response) => return response,
        };
        let stopping = gateway.stopping_token();
        if task.state.is_final() || tokio::time::Instant::now() >= until || stopping.is_cancelled() {
            return view(&gateway, &handle, &task);
        }
        tokio::select! {
            () = ticket.ended() => {}
            () = tokio::time::sleep_until(until) => {}
            // A gateway shutting down answers its waiting callers as the task is now.
            () = stopping.cancelled() => {}
        }
    }
}

/// The delivery task `handle` names, or the answer saying why not.
async fn read(gateway: &Gateway, handle: &str, task_id: i64) -> Result<TaskInfo, Response> {
    match gateway.queue().get(task_id).await {
        Ok(Some(task)) if is_delivery_kind(&task.kind) && gateway.systems().opens(handle, &task) => Ok(task),
        Ok(_) => Err(not_found(handle)),
        Err(e) => {
            let detail = format!("cannot read the queue: {e}");
            Err(Problem::new(Reason::QueueUnavailable, detail).into_response())
        }
    }
}

fn view(gateway: &Gateway, handle: &str, task: &TaskInfo) -> Response {
    let view = TaskView::of(handle, task, gateway.systems());
    let retry_after = view.next_attempt_at.map(until);
    let mut response = Json(view).into_response();
    if let Some(retry_after) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, retry_after);
    }
    response
}

/// `Retry-After` for a time `at` (seconds since the Unix epoch): the whole
/// seconds until then, 0 once it passed.
pub(super) fn until(at: f64) -> HeaderValue {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    // Rounded up, and never negative: a float of seconds fits a u64.
    HeaderValue::from((at - now.as_secs_f64()).max(0.0).ceil() as u64)
}

fn not_found(handle: &str) -> Response {
    let detail = format!(
        "no deferred write {handle:?}: a deferred write is named by the handle its 202 gave in Location \
         (/tasks/{{handle}}), not by a task id"
    );
    Problem::new(Reason::NotFound, detail).into_response()
}
