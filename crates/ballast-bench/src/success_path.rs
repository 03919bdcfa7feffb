//! The success path: an operation that returns `Ok(1)` at once, called
//! through ballast and through its peers, each stack built the way its own
//! docs show. Shared by the `success_path` criterion bench (ns/call) and the
//! `success_allocs` bin (heap allocations per call), so both measure exactly
//! the same stacks.
//!
//! Every stack is driven on a current-thread tokio runtime with the time
//! driver on, one call after another, by [`Stack::call`].

use std::future::Future;
use std::io;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use ballast::{Breaker, Bulkhead, Policy, Retry, Timeout};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

pub use crate::policies::{ballast_full, ballast_full_rate_limited, ATTEMPT_TIMEOUT};

/// The operation: succeeds at once.
async fn op() -> Result<u32, io::Error> {
    Ok(1)
}

/// One stack under test: a way to make one call of the operation.
pub trait Stack {
    /// Makes one call; returns the operation's value (1), or 0 on a failure
    /// (which the success path never sees; the tests check it).
    fn call(&mut self) -> impl Future<Output = u32>;
}

/// A stack with its row label and what it contains.
pub struct Named<S> {
    /// The row label.
    pub name: &'static str,
    /// Exactly what the stack contains.
    pub contains: &'static str,
    /// The stack.
    pub stack: S,
}

/// `op().await`: no resilience at all, the floor.
pub struct Bare;

impl Stack for Bare {
    async fn call(&mut self) -> u32 {
        op().await.unwrap_or(0)
    }
}

/// `tokio::time::timeout(5 s, op())` alone.
pub struct TokioTimeout;

impl Stack for TokioTimeout {
    async fn call(&mut self) -> u32 {
        match tokio::time::timeout(ATTEMPT_TIMEOUT, op()).await {
            Ok(Ok(v)) => v,
            _ => 0,
        }
    }
}

/// A ballast policy, called as `policy.read(|_| async { Ok(1) })`.
pub struct Ballast(pub Policy);

impl Stack for Ballast {
    async fn call(&mut self) -> u32 {
        self.0.read(|_| op()).await.unwrap_or(0)
    }
}

/// The size in bytes of the future a call through the guide's policy
/// returns, as the benches make it (`policy.read(|_| op())`): what a caller
/// moves around before its first poll.
pub fn ballast_full_call_size() -> usize {
    let policy = ballast_full();
    let call = policy.read(|_| op());
    std::mem::size_of_val(&call)
}

/// Retry only: 3 attempts with the default budget, plus the default
/// aggressive 5 s attempt timeout that every ballast policy has (there is no
/// way to build one without a timeout).
pub fn ballast_retry() -> Policy {
    Policy::builder("bench").retry(Retry::attempts(3)).build().expect("builds")
}

/// The ballast floor: one attempt (`Retry::never().without_budget()`), no
/// breaker, no bulkhead, an explicit aggressive 5 s attempt timeout.
pub fn ballast_timeout() -> Policy {
    Policy::builder("bench")
        .retry(Retry::never().without_budget())
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .build()
        .expect("builds")
}

/// The floor plus the guide's count breaker (50 % over 50).
pub fn ballast_breaker() -> Policy {
    Policy::builder("bench")
        .retry(Retry::never().without_budget())
        .breaker(Breaker::count(0.5, 50))
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .build()
        .expect("builds")
}

/// The floor plus a bulkhead of 8 (no queue).
pub fn ballast_bulkhead() -> Policy {
    Policy::builder("bench")
        .retry(Retry::never().without_budget())
        .bulkhead(Bulkhead::new(8))
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .build()
        .expect("builds")
}

/// A tower retry policy: retries any error, at most `.0` more times.
#[derive(Clone, Copy, Debug)]
pub struct RetryErrors(pub usize);

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for RetryErrors {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Err(_) if self.0 > 0 => {
                self.0 -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// A tower service, driven as `svc.ready().await?.call(()).await` on one
/// long-lived `&mut` service (no clone per call).
pub struct Tower<S>(pub S);

impl<S: Service<(), Response = u32>> Stack for Tower<S> {
    async fn call(&mut self) -> u32 {
        match self.0.ready().await {
            Ok(svc) => svc.call(()).await.unwrap_or(0),
            Err(_) => 0,
        }
    }
}

/// A tower service cloned per call and then driven with `ready` + `call`:
/// how a service shared by many tasks is used (a task cannot share the
/// `&mut` that `call` needs).
pub struct TowerCloned<S>(pub S);

impl<S: Service<(), Response = u32> + Clone> Stack for TowerCloned<S> {
    async fn call(&mut self) -> u32 {
        let mut svc = self.0.clone();
        match svc.ready().await {
            Ok(svc) => svc.call(()).await.unwrap_or(0),
            Err(_) => 0,
        }
    }
}

/// tower's own middleware in ballast's order: `RetryLayer` (retries errors
/// up to 2 times, no backoff) → `ConcurrencyLimitLayer::new(8)` →
/// `TimeoutLayer::new(5 s)` over `service_fn`.
pub fn tower_stack() -> impl Service<(), Response = u32, Error = BoxError> + Clone + Send {
    ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(RetryErrors(2)))
        .layer(tower::limit::ConcurrencyLimitLayer::new(8))
        .layer(tower::timeout::TimeoutLayer::new(ATTEMPT_TIMEOUT))
        .service(tower::service_fn(|()| op()))
}

/// The error type tower-resilience's nested layers produce.
pub type TrError = tower_resilience::circuitbreaker::CircuitBreakerError<
    tower_resilience::bulkhead::BulkheadServiceError<
        tower_resilience::timelimiter::TimeLimiterError<io::Error>,
    >,
>;

/// tower-resilience 0.13 in ballast's order: retry (3 attempts, exponential
/// backoff from 500 ms) → circuit breaker (50 % over a window of 50, 30 s
/// open) → bulkhead (8, rejects when full) → time limiter (5 s) over
/// `service_fn`.
pub fn tower_resilience_stack() -> impl Service<(), Response = u32, Error = TrError> + Clone + Send {
    use tower_resilience::bulkhead::BulkheadLayer;
    use tower_resilience::circuitbreaker::CircuitBreakerLayer;
    use tower_resilience::retry::RetryLayer;
    use tower_resilience::timelimiter::TimeLimiterLayer;

    ServiceBuilder::new()
        .layer(
            RetryLayer::<(), u32, TrError>::builder()
                .max_attempts(3)
                .exponential_backoff(Duration::from_millis(500))
                .build(),
        )
        .layer(
            CircuitBreakerLayer::builder()
                .failure_rate_threshold(0.5)
                .sliding_window_size(50)
                .wait_duration_in_open(Duration::from_secs(30))
                .build()
                .expect("valid circuit breaker"),
        )
        .layer(
            BulkheadLayer::builder()
                .max_concurrent_calls(8)
                .reject_when_full()
                .build()
                .expect("valid bulkhead"),
        )
        .layer(TimeLimiterLayer::builder().timeout_duration(ATTEMPT_TIMEOUT).build())
        .service(tower::service_fn(|()| op()))
}

/// backon: `(|| op()).retry(ExponentialBuilder::default()).await` (3 retries,
/// exponential from 1 s, jitter off: backon's defaults). No timeout.
pub struct Backon;

impl Stack for Backon {
    async fn call(&mut self) -> u32 {
        op.retry(ExponentialBuilder::default()).await.unwrap_or(0)
    }
}

/// recloser: `AsyncRecloser::call(op())`, a breaker opening at 50 % over 50
/// calls, 30 s open. No timeout.
pub struct Recloser(pub recloser::AsyncRecloser);

impl Recloser {
    /// The breaker closest to the guide's count breaker.
    pub fn new() -> Self {
        Self(
            recloser::Recloser::custom()
                .error_rate(0.5)
                .closed_len(50)
                .open_wait(Duration::from_secs(30))
                .build()
                .into(),
        )
    }
}

impl Default for Recloser {
    fn default() -> Self {
        Self::new()
    }
}

impl Stack for Recloser {
    async fn call(&mut self) -> u32 {
        self.0.call(op()).await.unwrap_or(0)
    }
}

/// A current-thread runtime with the time driver, as every stack runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime")
}

/// Invokes `$body` once for every stack, in table order, with `$named`
/// bound to a fresh [`Named`] stack. A macro, since the stacks are of
/// different types.
#[macro_export]
macro_rules! for_each_stack {
    ($named:ident => $body:expr) => {{
        use $crate::success_path as sp;
        {
            let $named = sp::Named { name: "bare async call", contains: "op().await", stack: sp::Bare };
            $body;
        }
        {
            let $named = sp::Named {
                name: "tokio::time::timeout",
                contains: "tokio::time::timeout(5 s, op())",
                stack: sp::TokioTimeout,
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast full (guide)",
                contains: "retry 3 + budget → count breaker → bulkhead 8 → timeout 5 s",
                stack: sp::Ballast(sp::ballast_full()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast full + rate limit",
                contains: "the guide's stack with a rate limit that never refuses (1M/s, burst 2^32)",
                stack: sp::Ballast(sp::ballast_full_rate_limited()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast retry only",
                contains: "retry 3 + budget → default timeout 5 s (always present)",
                stack: sp::Ballast(sp::ballast_retry()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast breaker",
                contains: "1 attempt, no budget → count breaker → timeout 5 s",
                stack: sp::Ballast(sp::ballast_breaker()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast bulkhead",
                contains: "1 attempt, no budget → bulkhead 8 → timeout 5 s",
                stack: sp::Ballast(sp::ballast_bulkhead()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "ballast timeout",
                contains: "1 attempt, no budget → timeout 5 s",
                stack: sp::Ballast(sp::ballast_timeout()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "tower",
                contains: "RetryLayer(2 retries) → ConcurrencyLimit 8 → Timeout 5 s; ready+call on one &mut",
                stack: sp::Tower(sp::tower_stack()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "tower (clone per call)",
                contains: "same stack, cloned per call, then ready+call",
                stack: sp::TowerCloned(sp::tower_stack()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "tower-resilience 0.13",
                contains: "retry 3 → circuit breaker 50 % / 50 → bulkhead 8 → time limiter 5 s",
                stack: sp::Tower(sp::tower_resilience_stack()),
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "backon retry",
                contains: "op.retry(ExponentialBuilder::default()); no timeout",
                stack: sp::Backon,
            };
            $body;
        }
        {
            let $named = sp::Named {
                name: "recloser",
                contains: "AsyncRecloser 50 % / 50; no timeout",
                stack: sp::Recloser::new(),
            };
            $body;
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_returns_the_value() {
        let rt = runtime();
        let mut names = Vec::new();
        crate::for_each_stack!(named => {
            let mut named = named;
            for _ in 0..100 {
                assert_eq!(rt.block_on(named.stack.call()), 1, "{}", named.name);
            }
            names.push(named.name);
        });
        assert_eq!(names.len(), 13);
    }
}
