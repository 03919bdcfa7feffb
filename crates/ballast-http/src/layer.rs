//! A tower [`Layer`] that puts any `Service<http::Request<B>>` behind a
//! [`Policy`], each request planned as [`crate::plan`] says of a request
//! nobody declared (R-RES-RE-1): a safe method is a read, a request carrying
//! a [`RequestKey`] extension is a keyed write, anything else is a write
//! made once.

use std::error::Error as StdError;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ballast::{Classification, Classify, Failure, IdempotencyKey, Policy};
use http::header::HeaderName;
use tower::{Layer, Service};

use crate::no_answer::NoAnswer;
use crate::plan::{Declared, Line};
use crate::routes::is_safe;
use crate::system_policy::SystemPolicy;
use crate::RetryOn;

/// A boxed error, as tower services commonly return.
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// The request extension that makes a request a keyed write: insert it with
/// `request.extensions_mut().insert(RequestKey(key))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey(pub IdempotencyKey);

/// Applies a [`Policy`] to a tower service, choosing the entry point per
/// request (R-RES-RE-1): a safe method (GET, HEAD, OPTIONS) is a read, a
/// request carrying a [`RequestKey`] extension is a keyed write, anything else
/// is a write made once.
///
/// The inner service is cloned for each attempt and the request too, so the
/// request body type must be `Clone` (a buffered body such as `String`,
/// `Bytes` or `Full<Bytes>`). A 4xx or 5xx response is an answer the policy
/// judges by [`RetryOn`], as for [`HttpSystem`](crate::HttpSystem): a
/// transient one is retried, and the call's last answer comes back as `Ok`
/// whatever its status — `Err` means there was no answer to give.
///
/// ```
/// use ballast::Policy;
/// use ballast_http::PolicyLayer;
/// use tower::Layer;
///
/// let layer = PolicyLayer::new(Policy::builder("crm").build().unwrap()).dedupes_by_key(true);
/// let service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
///     Ok::<_, std::io::Error>(http::Response::new(String::from("ok")))
/// }));
/// # let _ = service;
/// ```
#[derive(Debug, Clone, derive_setters::Setters)]
#[setters(generate = false)]
pub struct PolicyLayer {
    policy: Policy,
    /// Whether the service deduplicates writes by key; see
    /// [`HttpSystemBuilder::dedupes_by_key`](crate::HttpSystemBuilder::dedupes_by_key).
    #[setters(generate)]
    dedupes_by_key: bool,
    /// The header keyed writes carry their key in.
    #[setters(generate, rename = "idempotency_header")]
    header: HeaderName,
    /// Which outcome classes are transient.
    #[setters(generate)]
    retry_on: RetryOn,
}

impl PolicyLayer {
    /// A layer with `policy`, no deduplication by key, the `Idempotency-Key`
    /// header and the default [`RetryOn`].
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            dedupes_by_key: false,
            header: HeaderName::from_static("idempotency-key"),
            retry_on: RetryOn::default(),
        }
    }
}

impl<S> Layer<S> for PolicyLayer {
    type Service = PolicyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let system_policy =
            SystemPolicy::new(self.policy.clone(), self.dedupes_by_key, self.header.clone(), self.retry_on);
        PolicyService { inner, system_policy: Arc::new(system_policy) }
    }
}

/// A service behind a [`Policy`]; made by [`PolicyLayer`].
#[derive(Debug, Clone)]
pub struct PolicyService<S> {
    inner: S,
    system_policy: Arc<SystemPolicy>,
}

/// Why one attempt through a [`PolicyService`] got no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// The service returned an error.
    #[error(transparent)]
    NoAnswer(NoAnswer<BoxError>),
    /// The request was refused before any attempt.
    #[error("invalid request: {reason}; it was not sent")]
    InvalidRequest {
        /// What is wrong.
        reason: String,
    },
}

impl Classify for ServiceError {
    fn classify(&self) -> Classification {
        match self {
            ServiceError::NoAnswer(no_answer) => no_answer.classify(),
            _ => Classification::permanent(),
        }
    }
}

type Outcome<RB> = Result<http::Response<RB>, Failure<ServiceError>>;

impl<S, B, RB> Service<http::Request<B>> for PolicyService<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Clone + Send + Sync + 'static,
    RB: Send + 'static,
{
    type Response = http::Response<RB>;
    type Error = Failure<ServiceError>;
    type Future = Pin<Box<dyn Future<Output = Outcome<RB>> + Send>>;

    /// Always ready: each attempt waits for its own clone of the inner
    /// service, inside the bulkhead and the attempt timeout.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        let system_policy = self.system_policy.clone();
        Box::pin(async move {
            let key = request.extensions().get::<RequestKey>().map(|k| k.0.clone());
            let (method, path) = (request.method().clone(), request.uri().path().to_owned());
            let line =
                Line { method: &method, path: &path, headers: request.headers(), is_read: is_safe(&method) };
            let planner = system_policy.planner();
            let plan = match planner.plan(line, Declared::ByMethod(key.as_ref())) {
                Ok(plan) => plan,
                Err(refused) => {
                    return Err(Failure::unsent(ServiceError::InvalidRequest {
                        reason: refused.error.to_string(),
                    }))
                }
            };
            if let Err(e) = system_policy.set_key(&plan, request.headers_mut()) {
                return Err(Failure::unsent(ServiceError::InvalidRequest { reason: e.to_string() }));
            }
            let retry_on = system_policy.retry_on;
            let request = &request;
            let judge = plan.judge(retry_on);
            system_policy
                .run(&plan, judge, move |_ctx| {
                    let mut service = inner.clone();
                    let request = request.clone();
                    async move {
                        let failed = |e: S::Error| service_error(e.into(), retry_on);
                        poll_fn(|cx| service.poll_ready(cx)).await.map_err(failed)?;
                        service.call(request).await.map_err(failed)
                    }
                })
                .await
        })
    }
}

fn service_error(source: BoxError, retry_on: RetryOn) -> ServiceError {
    let kind = crate::classify::transport_kind(source.as_ref());
    ServiceError::NoAnswer(NoAnswer::new(kind, retry_on, source))
}
