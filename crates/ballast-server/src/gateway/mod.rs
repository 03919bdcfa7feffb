//! The outbound gateway: services in any language call the external systems
//! through `ballast serve` and get every rule at once — reads retried, keyed
//! writes retried with the same key (or handed to the durable queue),
//! unkeyed writes sent once, 4xx never retried, the breaker and the bulkhead
//! shared by every process on the host.
//!
//! | route | what |
//! |---|---|
//! | `/call/{system}/{path…}?{query}` (any method) | the request, sent to the system's `base_url` + `{path…}?{query}` through its policy |
//! | `GET /tasks/{id}` | a deferred write's state |
//!
//! The gateway's own answers are `application/problem+json`
//! ([`problem`]); every response carries `Ballast-Attempts`.

mod call;
mod cut;
mod headers;
mod names;
pub mod problem;
mod tasks;
mod trace;
mod waiters;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use ballast_config::GatewaySettings;
use ballast_http::delivery::CallbackPolicy;
use ballast_http::Systems;
use ballast_queue::Queue;

use crate::auth::{Check, Token};
use crate::origin::Hosts;
use problem::{Problem, Reason};

/// The methods the gateway forwards, for a 405's `Allow`.
const ALLOWED_METHODS: &str = "GET, HEAD, OPTIONS, POST, PUT, PATCH, DELETE";

pub use names::{ATTEMPTS, PROBLEM, ROUTE};

/// What the gateway's routes share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway(Arc<GatewayState>);

#[derive(Debug, Clone)]
struct GatewayState {
    systems: Systems,
    queue: Queue,
    max_body: usize,
    /// An answer's body past this many bytes is streamed.
    buffer_answer: usize,
    token: Option<Token>,
    /// `Keep-Alive: timeout=…` on every response, so clients drop an idle
    /// connection before the listener closes it under them.
    keep_alive: Option<HeaderValue>,
    /// Whether caller-sent `Forwarded` / `X-Forwarded-*` / `X-Real-IP` pass.
    trust_forwarded: bool,
    /// The `Host` names the gateway answers to; any `Host` when none are set
    /// (a router mounted in a test or another server).
    hosts: Option<Hosts>,
    /// Callers of `GET /tasks/{handle}?wait=…`.
    waiters: Arc<waiters::Waiters>,
    /// Where a `Ballast-Callback` may point.
    callbacks: CallbackPolicy,
    /// Cancelled when the gateway shuts down: waiting callers are answered.
    stopping: tokio_util::sync::CancellationToken,
    /// The process's drain: answers carry `Connection: close` once it
    /// begins, and calls in flight at its deadline are answered by it.
    drain: crate::drain::Drain,
}

/// What a gateway runs with besides its settings: the running parts the
/// composition root ([`Server::bind`](crate::Server::bind)) builds.
#[derive(Debug, Clone)]
pub struct Parts {
    /// The systems `/call/{system}/…` reaches.
    pub systems: Systems,
    /// Where keyed writes are deferred and `/tasks/{id}` reads.
    pub queue: Queue,
    /// With a token, only requests that bring it are admitted.
    pub token: Option<Token>,
    /// The `Host` names answered (its loopback and listen addresses,
    /// `localhost`, `[gateway] allowed_hosts`); any other `Host` gets 421,
    /// as on the admin listener: a page that rebinds its own name to this
    /// host must not reach the systems with their credentials. `None`
    /// answers any `Host` (a router mounted in a test or another server).
    pub hosts: Option<Hosts>,
    /// Where a `Ballast-Callback` (where to `POST` when a deferred write
    /// ends) may point; with none allowed, every callback is refused 400
    /// `bad_callback`. The worker sending them needs the same policy
    /// ([`CallbackHandler`](ballast_http::delivery::CallbackHandler)).
    pub callbacks: CallbackPolicy,
    /// The process's drain ([`crate::drain`]): from its start every answer
    /// carries `Connection: close`; at its deadline a call still in flight
    /// is answered (a keyed write handed to the queue with its key) rather
    /// than cut.
    pub drain: crate::drain::Drain,
    /// Cancelled when the gateway stops: every caller waiting on a task
    /// (`?wait=`) is answered as the task is then, not cut off.
    pub stopping: tokio_util::sync::CancellationToken,
}

impl Gateway {
    /// A gateway as `[gateway]` declares it, on `parts`:
    ///
    /// - bodies buffered up to `max_body` bytes;
    /// - an answer's body read whole up to `buffer_answer` bytes and a
    ///   larger one streamed to the caller, judged on its status and
    ///   headers ([`ballast_http::stream`]), so a large download holds
    ///   about this much memory, not its size (a keyed write's answer, and
    ///   a deferred one's, is always read whole);
    /// - caller-sent `Forwarded`, `X-Forwarded-*` and `X-Real-IP` passed
    ///   upstream only with `trust_forwarded` (else dropped, so no caller
    ///   speaks for another);
    /// - at most `max_waiters` callers of `GET /tasks/{handle}?wait=…` held
    ///   at once, more answered 503 `too_many_waiters`;
    /// - every response telling clients to drop a connection idle for a
    ///   second less than `header_read_timeout`, the listener's wait for
    ///   the next request's headers: a request sent on a connection the
    ///   listener is closing fails without knowing whether it was sent.
    pub fn new(settings: &GatewaySettings, parts: Parts) -> Self {
        let Parts { systems, queue, token, hosts, callbacks, drain, stopping } = parts;
        let idle = settings.listener.header_read_timeout.as_secs().saturating_sub(1).max(1);
        Self(Arc::new(GatewayState {
            systems,
            max_body: settings.max_body,
            buffer_answer: settings.buffer_answer,
            token,
            keep_alive: HeaderValue::from_str(&format!("timeout={idle}")).ok(),
            trust_forwarded: settings.trust_forwarded,
            hosts,
            waiters: Arc::new(waiters::Waiters::new(queue.clone(), settings.max_waiters)),
            callbacks,
            stopping,
            drain,
            queue,
        }))
    }

    /// `/call/{system}/…` and `/tasks/{id}`, behind the token if there is one.
    pub fn router(self) -> Router {
        Router::new()
            .route("/call/{*target}", any(call::call))
            .route("/tasks/{id}", get(tasks::task))
            .fallback(not_found)
            // One layer in front of every route (each layer costs a boxed future a request).
            .layer(axum::middleware::from_fn_with_state(self.clone(), front))
            .with_state(self)
    }

    fn systems(&self) -> &Systems {
        &self.0.systems
    }

    fn stopping_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.0.stopping
    }

    fn drain_state(&self) -> &crate::drain::Drain {
        &self.0.drain
    }

    fn callback_policy(&self) -> &CallbackPolicy {
        &self.0.callbacks
    }

    fn waiters(&self) -> &waiters::Waiters {
        &self.0.waiters
    }

    fn queue(&self) -> &Queue {
        &self.0.queue
    }

    fn max_body(&self) -> usize {
        self.0.max_body
    }

    fn buffer_answer_size(&self) -> usize {
        self.0.buffer_answer
    }

    fn has_token(&self) -> bool {
        self.0.token.is_some()
    }

    fn trusts_forwarded(&self) -> bool {
        self.0.trust_forwarded
    }
}

/// What every request meets first: refused if its `Host` is not one of
/// the gateway's names (421), if its method is one the gateway never
/// forwards (405: `TRACE` would echo the system's credentials back, RFC
/// 9110 §9.3.8; `CONNECT` would open a tunnel), if a browser marks it
/// cross-site ([`crate::origin`]) or if it lacks the gateway's token;
/// answered with the keep-alive hint.
async fn front(State(gateway): State<Gateway>, request: Request, next: Next) -> Response {
    let foreign_host = gateway.0.hosts.as_ref().and_then(|hosts| crate::origin::misdirected(hosts, &request));
    let method = request.method().as_str();
    let mut response = if let Some(refused) = foreign_host {
        refused
    } else if method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("CONNECT") {
        let detail = format!(
            "the gateway never forwards {method}: TRACE would echo the system's credentials back, CONNECT \
             would open a tunnel past the policy; nothing was sent"
        );
        let mut refused = Problem::new(Reason::MethodNotAllowed, detail).into_response();
        refused.headers_mut().insert(axum::http::header::ALLOW, HeaderValue::from_static(ALLOWED_METHODS));
        refused
    } else if let Some(refused) = crate::origin::from_another_site(request.headers()) {
        refused
    } else {
        let check =
            gateway.0.token.as_ref().map(|t| t.check_bearer(request.headers(), crate::auth::peer(&request)));
        match check {
            Some(Check::Refused) => {
                let detail = "this gateway asks for `Authorization: Bearer <token>`";
                let mut response = Problem::new(Reason::Unauthorized, detail).into_response();
                response
                    .headers_mut()
                    .insert(axum::http::header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                response
            }
            Some(Check::Throttled(wait)) => {
                let detail =
                    "too many wrong tokens lately, from this address or at this gateway: try again later";
                Problem::new(Reason::TokenThrottled, detail).retry_after(wait).into_response()
            }
            Some(Check::Admitted) | None => next.run(request).await,
        }
    };
    if gateway.0.drain.is_draining() {
        // Kept-alive callers reconnect, and find a replica that serves on.
        response.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    } else if let Some(hint) = &gateway.0.keep_alive {
        response.headers_mut().insert(names::KEEP_ALIVE, hint.clone());
    }
    response
}

async fn not_found() -> Response {
    let detail = "the gateway serves /call/{system}/{path} and /tasks/{id}";
    Problem::new(Reason::NotFound, detail).into_response()
}
