//! `/call/{system}/{path…}?{query}`: one request of a service, sent to the
//! system's `base_url` through the system's policy, as the system plans it
//! once, before anything else is decided ([`HttpSystem::plan_forwarded`],
//! the plan carried with the request; the table of what a request is, by its
//! route, method and key, is in [`ballast_http::plan`]) — the method in any
//! case, the path in any spelling; a write the system's routes do not
//! declare is refused unsent by default (400 `unrouted`, R-RES-RE-1). With
//! `Prefer: respond-async`, a keyed write to a system that deduplicates by
//! key goes through [`Planned::defer`](ballast_http::Planned::defer), on a
//! task of its own that outlives its caller: 202 and a task handle when the
//! queue takes it over.
//!
//! A keyed write binds its key to its request for the system's `key_ttl`
//! ([`ballast_http::key_life`]): another request under a key its caller
//! used within that life is refused unsent, `422 key_reused`.
//!
//! A request a route matched is answered with `Ballast-Route: POST
//! /payments/{id}` — the template, never the path — which the server span's
//! `http.route` and the route metrics carry too.
//!
//! The gateway adds no policy of its own: it plans the request once and
//! sends it as planned. The upstream's status, headers and body come back
//! unchanged, a 4xx included; the gateway answers itself only when there is
//! no answer to pass on (see [`Problem`]). Every response carries
//! `Ballast-Attempts`.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ballast::{Failure, Rule};
use ballast_http::plan::key_in;
use ballast_http::routes::canonical_method;
use ballast_http::{HttpError, HttpSystem, Refused};
use ballast_queue::{Handover, HandoverError};
use tracing::Instrument;

use super::headers::{came_through_us, forwarded, wants_async, RESPOND_ASYNC, VIA_NAME};
use super::names::{ATTEMPTS, CALLBACK, IDEMPOTENCY_KEY, PREFERENCE_APPLIED, ROUTE, SEQUENCE};
use super::problem::{Problem, Reason};
use super::Gateway;

/// The prefix of the keys of periodic calls' tasks (`periodic:NAME:START`).
const PERIODIC_PREFIX: &str = "periodic:";

pub(super) async fn call(State(gateway): State<Gateway>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Some((name, path)) = target(parts.uri.path()) else {
        let detail = "call a system as /call/{system}/{path}";
        return Problem::new(Reason::NotFound, detail).into_response();
    };
    let span = super::trace::server_span(&parts, &name);
    if span.is_disabled() {
        return handle(gateway, parts, body, name, path).await;
    }
    let response = handle(gateway, parts, body, name.clone(), path).instrument(span.clone()).await;
    super::trace::record(&span, &name, &response);
    response
}

/// The call itself, inside the server span when there is one.
async fn handle(
    gateway: Gateway,
    mut parts: axum::http::request::Parts,
    body: Body,
    name: String,
    path: String,
) -> Response {
    let Some(system) = gateway.systems().get(&name) else {
        let names = gateway.systems().names().join(", ");
        let detail = format!("no system {name:?} is configured; the systems are: {names}");
        return Problem::new(Reason::UnknownSystem, detail).into_response();
    };
    if came_through_us(&parts.headers) {
        let detail = format!(
            "this request already came through a ballast gateway (Via: 1.1 {VIA_NAME}): the base_url of {name:?} \
             points back at the gateway, so it would call itself; nothing was sent"
        );
        return Problem::new(Reason::LoopDetected, detail).into_response();
    }
    let key = match key_in(&parts.headers, &IDEMPOTENCY_KEY) {
        // A periodic call's task is found by its key: a caller's deferred
        // write under it would take that period's place.
        Ok(Some(key)) if key.as_str().starts_with(PERIODIC_PREFIX) => {
            return bad_key(&format!(
                "keys starting with {PERIODIC_PREFIX:?} name periods of [queue.periodic.*] calls"
            ))
        }
        Ok(key) => key,
        Err(e) => return bad_key(&e.to_string()),
    };
    let sequence = match sequence_in(&mut parts.headers) {
        Ok(sequence) => sequence,
        Err(problem) => return problem.into_response(),
    };
    let callback = match callback_in(&mut parts.headers, &gateway) {
        Ok(callback) => callback,
        Err(problem) => return problem.into_response(),
    };
    let body = match read_body(body, &parts.headers, gateway.max_body()).await {
        Ok(body) => body,
        Err(problem) => return problem.into_response(),
    };
    let asks_async = wants_async(&parts.headers);
    // `post` is `POST`: no spelling of a method escapes its route.
    let method = canonical_method(&parts.method);
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let headers = forwarded(parts.headers, gateway.has_token(), gateway.trusts_forwarded());
    let mut request =
        ballast_http::Request::new(method, &path).raw_query(&query).with_headers(headers).body(body);
    if let Some(sequence) = sequence {
        request = request.sequence(sequence);
    }
    // Planned once, here, before anything is spawned: the plan says what
    // the call is, not the request. Only a keyed write the system
    // deduplicates may outlive its caller (a keyed GET asking for
    // `respond-async` is a read, and streams as one).
    let planned = match system.plan_forwarded(request, key) {
        Ok(planned) => planned,
        Err(refused) => return refusal(refused, &system),
    };
    if asks_async && planned.plan().is_deduplicated_write() {
        // Detached: a caller that hangs up must not take the deferral
        // with it — the write goes on, to the queue if need be.
        let call = tokio::spawn(
            async move { sent(&gateway, &system, planned, Some(callback)).await }.in_current_span(),
        );
        return call.await.unwrap_or_else(|e| {
            let detail =
                format!("the deferrable write stopped ({e}); whether it reached the system is unknown");
            Problem::new(Reason::Internal, detail).into_response()
        });
    }
    let planned = planned.stream_answer_past(gateway.buffer_answer_size());
    sent(&gateway, &system, planned, None).await
}

/// A request its plan refused, answered unsent, with the route it reached
/// when a route's key was missing.
fn refusal(refused: HttpError, system: &HttpSystem) -> Response {
    let route = match &refused {
        HttpError::Refused(Refused::KeyRequired { route }) => HeaderValue::from_str(route).ok(),
        _ => None,
    };
    let mut response = answer(Err(Failure::unsent(refused)), system);
    if let Some(route) = route {
        response.headers_mut().insert(ROUTE, route);
    }
    response
}

/// The call as planned — deferred when it may be (`defer`, with the
/// callback it asks for) and it is a keyed write the system deduplicates —
/// answered with the route it reached.
async fn sent(
    gateway: &Gateway,
    system: &HttpSystem,
    planned: ballast_http::Planned,
    defer: Option<Option<String>>,
) -> Response {
    let may_defer = defer.is_some();
    let plan = planned.plan();
    let request = planned.request();
    let key = plan.operation().key();
    let route = plan.route().and_then(|r| HeaderValue::from_str(r.name()).ok());
    let deferrable = may_defer && plan.is_deduplicated_write();
    let sequence = plan.sequence(request);
    if let Some(Err(e)) = sequence.as_deref().map(ballast_queue::check_sequence) {
        let detail = format!(
            "the sequence route {} makes of this path: {e}; nothing was sent",
            plan.route().map_or("", |r| r.name())
        );
        return Problem::new(Reason::BadRequest, detail).into_response();
    }
    let read = matches!(plan.operation(), ballast::Operation::Read);
    if let Some(sequence) = sequence.as_deref().filter(|_| !deferrable && !read) {
        // Sent now, it would overtake an earlier write of its sequence still
        // waiting in the queue.
        let stored = match Box::pin(system.sequence_in(gateway.queue(), sequence)).await {
            Ok(stored) => stored,
            Err(e) => return answer(Err(Failure::unsent(e)), system),
        };
        let pending = match Box::pin(gateway.queue().sequence_head(&stored)).await {
            Ok(head) => {
                head.map(|task_id| HttpError::SequencePending { sequence: sequence.to_owned(), task_id })
            }
            Err(error) => {
                let detail = format!("the queue cannot say whether a write of sequence {sequence:?} waits: {error}; nothing was sent");
                return Problem::new(Reason::QueueUnavailable, detail).into_response();
            }
        };
        if let Some(pending) = pending {
            return answer(Err(Failure::unsent(pending)), system);
        }
    }
    // A deferrable write binds its key on its way to the queue
    // (`write_or_defer`); any other keyed write binds it here.
    if let Some(key) = plan.operation().key().filter(|_| !deferrable) {
        if let Err(reused) = Box::pin(system.bind_key(gateway.queue(), key, request)).await {
            return answer(Err(Failure::unsent(reused)), system);
        }
    }
    let at_the_cut = super::cut::AtTheCut::of(
        request,
        key,
        plan.is_deduplicated_write(),
        read,
        sequence.clone(),
        defer.clone().filter(|_| deferrable),
    );
    let call = async {
        if deferrable {
            let mut options = ballast_http::delivery::DeferOptions::default();
            if let Some(url) = defer.flatten() {
                options = options.callback(url);
            }
            Box::pin(deferred(gateway, system, planned, &options)).await
        } else {
            // The call's future is large (the policy's state, the attempt, the
            // transport's): boxed here once, the handler's stays small, so the
            // router's layers move a pointer instead of copying it each. So
            // are the database round trips above and the deferral, which
            // the handler's state would otherwise be as large as.
            answer(Box::pin(planned.send()).await, system)
        }
    };
    let drain = gateway.drain_state();
    let mut response = tokio::select! {
        biased;
        response = call => {
            drain.finished();
            response
        }
        () = drain.reached(crate::drain::Phase::Cut) => Box::pin(at_the_cut.answer(gateway, system)).await,
    };
    if let Some(route) = route {
        response.headers_mut().insert(ROUTE, route);
    }
    response
}

/// The system's name (percent-decoded) and the path after it, as sent.
fn target(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/call/")?;
    let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
    let name = percent_encoding::percent_decode_str(name).decode_utf8().ok()?;
    (!name.is_empty()).then(|| (name.into_owned(), path.to_owned()))
}

/// The `Ballast-Sequence` header, taken off the request: `None` without it.
fn sequence_in(headers: &mut axum::http::HeaderMap) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all(&SEQUENCE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        if headers.contains_key(&SEQUENCE) {
            let detail = "the request has more than one Ballast-Sequence header; nothing was sent";
            return Err(Problem::new(Reason::BadRequest, detail));
        }
        return Ok(None);
    };
    let sequence = value.to_str().unwrap_or_default().to_owned();
    if let Err(e) = ballast_queue::check_sequence(&sequence) {
        return Err(Problem::new(
            Reason::BadRequest,
            format!("the Ballast-Sequence header: {e}; nothing was sent"),
        ));
    }
    headers.remove(&SEQUENCE);
    Ok(Some(sequence))
}

/// The `Ballast-Callback` header, taken off the request and checked against
/// `[gateway] callback_hosts`: `None` without it.
fn callback_in(headers: &mut axum::http::HeaderMap, gateway: &Gateway) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all(&CALLBACK).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        if headers.contains_key(&CALLBACK) {
            let detail = "the request has more than one Ballast-Callback header; nothing was sent";
            return Err(Problem::new(Reason::BadCallback, detail));
        }
        return Ok(None);
    };
    let url = value.to_str().unwrap_or_default().trim().to_owned();
    if let Err(refused) = gateway.callback_policy().check(&url) {
        let detail = format!("the Ballast-Callback header: {refused}; nothing was sent");
        return Err(Problem::new(Reason::BadCallback, detail));
    }
    headers.remove(&CALLBACK);
    Ok(Some(url))
}

fn bad_key(reason: &str) -> Response {
    let detail = format!("the Idempotency-Key header is not a valid key ({reason}); nothing was sent");
    Problem::new(Reason::BadKey, detail).rule(Some(Rule::Re1)).into_response()
}

/// The body, buffered: refused past `max_body` before anything is sent.
async fn read_body(
    body: Body,
    headers: &axum::http::HeaderMap,
    max_body: usize,
) -> Result<bytes::Bytes, Problem> {
    let too_large = || {
        let detail = format!("the request body is larger than max_body ({max_body} bytes); nothing was sent");
        Problem::new(Reason::TooLarge, detail)
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, max_body).await.map_err(|e| {
        // The body's own error sits some layers down (axum's, the length limit's).
        let causes = std::iter::successors(std::error::Error::source(&e), |s| s.source());
        let mut causes = causes.collect::<Vec<_>>().into_iter();
        let over = causes.clone().any(|s| s.is::<http_body_util::LengthLimitError>());
        if over {
            too_large()
        } else if let Some(late) = causes.find_map(|s| s.downcast_ref::<crate::listener::BodyTimeout>()) {
            let detail = format!("{late}; nothing was sent");
            Problem::new(Reason::BodyTimeout, detail)
        } else {
            Problem::new(Reason::BadRequest, format!("the request body broke off: {e}"))
        }
    })
}

/// A keyed write the caller lets the gateway defer: the system's own
/// [`Planned::defer`](ballast_http::Planned::defer), answered
/// 202 with the task's handle when the queue takes it over.
async fn deferred(
    gateway: &Gateway,
    system: &HttpSystem,
    planned: ballast_http::Planned,
    options: &ballast_http::delivery::DeferOptions,
) -> Response {
    match planned.defer(gateway.queue(), options).await {
        Ok(Handover::Done(response)) => upstream(response),
        Ok(Handover::Deferred { task_id, attempts }) => accepted(gateway, task_id, attempts).await,
        Err(HandoverError::Failed(failure)) => answer(Err(failure), system),
        Err(HandoverError::Enqueue { failure, error }) => {
            let detail = format!("{failure}; deferring it to the queue failed too: {error}");
            Problem::new(Reason::QueueUnavailable, detail).attempts(failure.attempts()).into_response()
        }
    }
}

/// `202 Accepted` for a write the queue took over as task `task_id`, after
/// `attempts` in memory: its handle in `Location` and the body, when it is
/// due in `Retry-After`.
pub(super) async fn accepted(gateway: &Gateway, task_id: i64, attempts: u32) -> Response {
    // The task may be an earlier one with the same key: its handle is its own.
    let stored = gateway.queue().get(task_id).await.ok().flatten();
    let handle = stored.as_ref().and_then(|task| gateway.systems().handle_of(task));
    // Deferred all the same; without a handle (a task stored by an
    // older version) there is only nothing to point at.
    let view = match (&stored, &handle) {
        (Some(task), Some(handle)) => Some(ballast_http::TaskView::of(handle, task, gateway.systems())),
        _ => None,
    };
    let next = view.as_ref().and_then(|v| v.next_attempt_at);
    let body = serde_json::json!({
        "task_id": handle,
        "state": "pending",
        "deferred_because": view.as_ref().and_then(|v| v.deferred_because),
        "next_attempt_at": next,
    });
    let mut response =
        (StatusCode::ACCEPTED, [(PREFERENCE_APPLIED, RESPOND_ASYNC.to_owned())], axum::Json(body))
            .into_response();
    if let Some(location) = handle.and_then(|h| HeaderValue::from_str(&format!("/tasks/{h}")).ok()) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    if let Some(at) = next {
        response.headers_mut().insert(header::RETRY_AFTER, super::tasks::until(at));
    }
    response.headers_mut().insert(ATTEMPTS, HeaderValue::from(attempts));
    response
}

/// The response to send for a call's outcome: the upstream's answer as it
/// came, or, when there was none, the gateway's problem.
fn answer(outcome: Result<ballast_http::Response, Failure<HttpError>>, system: &HttpSystem) -> Response {
    match outcome {
        Ok(response) => upstream(response),
        Err(failure) => Problem::from_failure(&failure, system.name()).into_response(),
    }
}

/// The upstream's answer as it came, without hop-by-hop headers, with
/// `Ballast-Attempts`; its parts move, nothing is copied. A body larger
/// than the gateway's buffer streams on as it comes; its length, when the
/// upstream said it, is passed on.
fn upstream(response: ballast_http::Response) -> Response {
    let attempts = response.attempts();
    let (status, headers, body) = if response.is_streamed() {
        let (status, headers, stream) = response.into_streamed_parts();
        (status, headers, Body::new(stream))
    } else {
        let (status, headers, body) = response.into_parts();
        (status, headers, Body::from(body))
    };
    let mut headers = super::headers::end_to_end(headers);
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(ATTEMPTS, HeaderValue::from(attempts));
    let mut out = Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

#[cfg(test)]
mod tests {
    use super::target;

    #[test]
    fn the_system_and_the_path_come_from_the_url() {
        assert_eq!(target("/call/sber/api/payments"), Some(("sber".into(), "api/payments".into())));
        assert_eq!(target("/call/sber"), Some(("sber".into(), String::new())));
        assert_eq!(target("/call/sms%2Dgw/a%20b"), Some(("sms-gw".into(), "a%20b".into())));
        assert_eq!(target("/call/"), None);
        assert_eq!(target("/tasks/1"), None);
    }
}
