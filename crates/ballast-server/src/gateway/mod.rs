//! The outbound gateway: services in any language call the external systems
//! through `ballast serve` and get every rule at once — reads retried, keyed
//! writes retried with the same key (or handed to the durable queue),
//! unkeyed writes sent once, 4xx never retried, the breaker and the bulkhead
//! shared by every process on the host.
//!
//! | route | what |
//! |---|---|
//! | `/call/{system}/{path…}?{query}` (any method) | the request, sent to the system's `base_url` + `{path…}?{query}` through its policy ([`call`]) |
//! | `GET /tasks/{id}` | a deferred write's state ([`tasks`]) |
//!
//! The gateway's own answers are `application/problem+json`
//! ([`problem`]); every response carries `Ballast-Attempts`.

mod call;
mod headers;
pub mod problem;
mod tasks;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::HeaderName;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use ballast_http::Systems;
use ballast_queue::Queue;

use crate::auth::Token;
use problem::{Problem, Reason};

/// The header every gateway response carries: the attempts the call made.
pub const ATTEMPTS: HeaderName = HeaderName::from_static("ballast-attempts");

/// What the gateway's routes share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Gateway(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    systems: Systems,
    queue: Queue,
    max_body: usize,
    token: Option<Token>,
}

impl Gateway {
    /// A gateway to `systems` that defers keyed writes to `queue`, buffers
    /// bodies up to `max_body` bytes and, with a `token`, admits only requests
    /// that bring it.
    pub fn new(systems: Systems, queue: Queue, max_body: usize, token: Option<Token>) -> Self {
        Self(Arc::new(Inner { systems, queue, max_body, token }))
    }

    /// `/call/{system}/…` and `/tasks/{id}`, behind the token if there is one.
    pub fn router(self) -> Router {
        Router::new()
            .route("/call/{*target}", any(call::call))
            .route("/tasks/{id}", get(tasks::task))
            .fallback(not_found)
            .route_layer(axum::middleware::from_fn_with_state(self.clone(), admit))
            .with_state(self)
    }

    fn systems(&self) -> &Systems {
        &self.0.systems
    }

    fn queue(&self) -> &Queue {
        &self.0.queue
    }

    fn max_body(&self) -> usize {
        self.0.max_body
    }

    fn has_token(&self) -> bool {
        self.0.token.is_some()
    }
}

/// Lets a request through if the gateway has no token or the request brings it.
async fn admit(State(gateway): State<Gateway>, request: Request, next: Next) -> Response {
    match &gateway.0.token {
        Some(token) if !token.admits(request.headers()) => {
            let detail = "this gateway asks for `Authorization: Bearer <token>`";
            let mut response =
                Problem::new(StatusCode::UNAUTHORIZED, Reason::Unauthorized, detail).into_response();
            response
                .headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid"));
            response
        }
        _ => next.run(request).await,
    }
}

async fn not_found() -> Response {
    let detail = "the gateway serves /call/{system}/{path} and /tasks/{id}";
    Problem::new(StatusCode::NOT_FOUND, Reason::BadRequest, detail).into_response()
}
