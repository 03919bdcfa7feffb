//! ballast inside a [`reqwest_middleware`] chain, where `reqwest-retry`
//! usually sits. Available with the crate's `middleware` feature.
//!
//! `reqwest-retry` retries every request whose answer looks transient —
//! POSTs without a key included, which is how a lost answer becomes a second
//! payment. [`PolicyMiddleware`] applies one system's [`Policy`] instead and
//! decides per request, as [`HttpSystem`](crate::HttpSystem) does
//! (R-RES-RE-1):
//!
//! | request | entry point |
//! |---|---|
//! | GET, HEAD, OPTIONS | `read`: retried on transient failures |
//! | carries the system's idempotency header (default `Idempotency-Key`) | keyed `write`: retried only if the system [dedupes by key](PolicyMiddleware::dedupes_by_key), the same key every attempt |
//! | anything else | `write_once`: exactly one attempt (R-RES-RE-X1) |
//! | a body that cannot be cloned (a stream) | one attempt, whatever the method; the failure says why |
//! | the idempotency header twice, or not a key | refused unsent |
//!
//! Every attempt passes the rest of the chain (`next`), so middlewares added
//! after this one see each attempt, those before it see the call once.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use ballast::{Policy, Retry};
//! use ballast_http::PolicyMiddleware;
//! use reqwest_middleware::ClientBuilder;
//!
//! let policy = Policy::builder("crm").retry(Retry::attempts(3)).build()?;
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(PolicyMiddleware::new(policy).dedupes_by_key(true))
//!     .build();
//! let order = client.get("https://crm.example/orders/7").send().await?; // a read: retried
//! let note = client.post("https://crm.example/notes").body("hi").send().await?; // no key: sent once
//! # let _ = (order, note); Ok(()) }
//! ```
//!
//! Outcomes: the upstream's answer comes back as the response, a 4xx or 5xx
//! included (after the retries it allowed); a failure without an answer —
//! transport error after the last attempt, breaker open, bulkhead full,
//! timeout — is `reqwest_middleware::Error::Middleware` wrapping a
//! [`CallFailed`].

use std::fmt;
use std::sync::Arc;

use ballast::{Classification, Classify, Failure, Policy};
use http::header::HeaderName;
use http::Extensions;
use reqwest_middleware::{Middleware, Next};

use crate::no_answer::NoAnswer;
use crate::plan::{key_in, Declared, Line};
use crate::routes::is_safe;
use crate::system_policy::SystemPolicy;
use crate::HttpError;
use crate::RetryOn;

/// Applies one system's [`Policy`] to every request of a
/// `reqwest_middleware::ClientWithMiddleware`; see the [module
/// documentation](self).
#[derive(Debug, Clone)]
pub struct PolicyMiddleware {
    policy: Policy,
    dedupes_by_key: bool,
    header: HeaderName,
    retry_on: RetryOn,
    system_policy: Arc<SystemPolicy>,
}

impl PolicyMiddleware {
    /// A middleware with `policy`, no deduplication by key, the
    /// `Idempotency-Key` header and the default [`RetryOn`].
    pub fn new(policy: Policy) -> Self {
        let header = HeaderName::from_static("idempotency-key");
        Self::with(policy, false, header, RetryOn::default())
    }

    fn with(policy: Policy, dedupes_by_key: bool, header: HeaderName, retry_on: RetryOn) -> Self {
        let system_policy =
            Arc::new(SystemPolicy::new(policy.clone(), dedupes_by_key, header.clone(), retry_on));
        Self { policy, dedupes_by_key, header, retry_on, system_policy }
    }

    /// Whether the system deduplicates writes by key, so keyed writes may be
    /// retried; see [`HttpSystemBuilder::dedupes_by_key`](crate::HttpSystemBuilder::dedupes_by_key).
    pub fn dedupes_by_key(self, yes: bool) -> Self {
        Self::with(self.policy, yes, self.header, self.retry_on)
    }

    /// The header that makes a request a keyed write (default `Idempotency-Key`).
    pub fn idempotency_header(self, name: HeaderName) -> Self {
        Self::with(self.policy, self.dedupes_by_key, name, self.retry_on)
    }

    /// Which outcome classes are transient; see [`RetryOn`].
    pub fn retry_on(self, retry_on: RetryOn) -> Self {
        Self::with(self.policy, self.dedupes_by_key, self.header, retry_on)
    }
}

/// Why one attempt through [`PolicyMiddleware`] got no answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// No complete response: reqwest's error, or a failure of a middleware
    /// further down the chain.
    #[error(transparent)]
    NoAnswer(NoAnswer<reqwest_middleware::Error>),
    /// The request was refused before any attempt: its plan refused it, or
    /// its body, a stream, was already taken by the one attempt it may have.
    #[error("{source}")]
    Refused {
        /// Why, in the words (and with the rule id) of the refusal.
        source: HttpError,
    },
    /// The idempotency header holds no valid key; the request was not sent.
    #[error("the {header} header is not a valid idempotency key ({reason}); the request was not sent")]
    InvalidKey {
        /// The header's name.
        header: HeaderName,
        /// What is wrong with the value.
        reason: String,
    },
}

impl Classify for AttemptError {
    fn classify(&self) -> Classification {
        match self {
            AttemptError::NoAnswer(no_answer) => no_answer.classify(),
            _ => Classification::permanent(),
        }
    }
}

/// A call through [`PolicyMiddleware`] that got no answer to return: what
/// the policy reported, and whether the request could only be sent once
/// because its body is a stream.
#[derive(Debug)]
pub struct CallFailed {
    /// What the policy reported.
    pub failure: Failure<AttemptError>,
    /// The body could not be cloned, so the request had one attempt whatever
    /// its method or key.
    pub sent_once_for_its_body: bool,
}

impl fmt::Display for CallFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.failure)?;
        if self.sent_once_for_its_body {
            f.write_str("; sent once: its body is a stream and cannot be sent again")?;
        }
        Ok(())
    }
}

impl std::error::Error for CallFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failure.error().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

#[async_trait::async_trait]
impl Middleware for PolicyMiddleware {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let system_policy = &self.system_policy;
        let key = match key_in(request.headers(), &self.header) {
            Ok(key) => key,
            Err(e) => {
                let error = AttemptError::InvalidKey { header: self.header.clone(), reason: e.to_string() };
                return Err(unsent(error));
            }
        };
        let cloneable = request.try_clone().is_some();
        let method = request.method();
        let line =
            Line { method, path: request.url().path(), headers: request.headers(), is_read: is_safe(method) };
        let planner = system_policy.planner();
        let plan = match planner.plan(line, Declared::ByMethod(key.as_ref())) {
            Ok(plan) if cloneable => plan,
            Ok(plan) => plan.streamed(),
            Err(refused) => return Err(unsent(AttemptError::Refused { source: refused.error })),
        };
        let retry_on = self.retry_on;
        let (template, mut once) = if cloneable { (Some(request), None) } else { (None, Some(request)) };
        let judge = plan.judge(retry_on);
        let outcome = system_policy
            .run(&plan, judge, |_ctx| {
                // A clone per attempt; a stream is taken by its only attempt.
                let request = template.as_ref().and_then(reqwest::Request::try_clone).or_else(|| once.take());
                let mut attempt_extensions = extensions.clone();
                let next = next.clone();
                async move {
                    // A request that cannot be cloned is a write made once: the
                    // only attempt has it.
                    let request = request.ok_or_else(|| AttemptError::Refused {
                        source: HttpError::invalid("its body is a stream, which can be sent once only"),
                    })?;
                    let response = match next.run(request, &mut attempt_extensions).await {
                        Ok(response) => response,
                        Err(source) => {
                            let kind = match &source {
                                reqwest_middleware::Error::Reqwest(e) => crate::classify::transport_kind(e),
                                reqwest_middleware::Error::Middleware(e) => {
                                    crate::classify::transport_kind(e.as_ref())
                                }
                            };
                            return Err(AttemptError::NoAnswer(NoAnswer::new(kind, retry_on, source)));
                        }
                    };
                    Ok((response, attempt_extensions))
                }
            })
            .await;
        match outcome {
            Ok((response, seen)) => {
                *extensions = seen;
                Ok(response)
            }
            Err(failure) => Err(reqwest_middleware::Error::middleware(CallFailed {
                failure,
                sent_once_for_its_body: !cloneable,
            })),
        }
    }
}

fn unsent(error: AttemptError) -> reqwest_middleware::Error {
    reqwest_middleware::Error::middleware(CallFailed {
        failure: Failure::unsent(error),
        sent_once_for_its_body: false,
    })
}
