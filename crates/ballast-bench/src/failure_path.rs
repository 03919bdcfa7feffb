//! The failure path: an operation that fails with a transient error on
//! every attempt, called through ballast, tower's retry and
//! tower-resilience's, each making 3 attempts (2 retries) with exponential
//! backoff from 500 ms on tokio's paused clock, so the waits cost what
//! parking and advancing the clock cost, not real time.
//!
//! No stack has a circuit breaker: against an operation that always fails a
//! breaker opens, and the figure would be the rejection path instead.
//! Ballast keeps the rest of the guide's stack (budget, bulkhead 8, timeout
//! 5 s); the peers keep the same layers where they have them.

use std::io;
use std::time::Duration;

use ballast::{Backoff, Bulkhead, Policy, Retry, Timeout};
use tower::{BoxError, Service, ServiceBuilder};

use crate::success_path::{Stack, ATTEMPT_TIMEOUT};

/// The attempts every stack makes, the first included.
pub const ATTEMPTS: u32 = 3;

/// The first backoff delay of every stack.
pub const FIRST_DELAY: Duration = Duration::from_millis(500);

/// The operation: a transient error at once.
async fn op() -> Result<u32, io::Error> {
    Err(io::ErrorKind::ConnectionRefused.into())
}

/// The guide's stack without its breaker: retry 3 attempts (default budget,
/// jittered exponential backoff from 500 ms) → bulkhead 8 → aggressive 5 s
/// attempt timeout.
pub fn ballast_policy() -> Policy {
    Policy::builder("bench")
        .retry(Retry::attempts(ATTEMPTS).backoff(Backoff::exponential(FIRST_DELAY)))
        .bulkhead(Bulkhead::new(8))
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .seed(1)
        .build()
        .expect("the policy builds")
}

/// A ballast policy whose calls always fail.
pub struct BallastFailing(pub Policy);

impl Stack for BallastFailing {
    async fn call(&mut self) -> u32 {
        self.0.read(|_| op()).await.unwrap_or(0)
    }
}

/// A tower retry policy: retries any error after 500 ms, then 1 s, …, at
/// most `ATTEMPTS − 1` times (tower leaves backoff to the policy).
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryWithBackoff {
    retried: u32,
}

impl<Req: Clone, Res, E> tower::retry::Policy<Req, Res, E> for RetryWithBackoff {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, _req: &mut Req, result: &mut Result<Res, E>) -> Option<Self::Future> {
        match result {
            Err(_) if self.retried + 1 < ATTEMPTS => {
                let delay = FIRST_DELAY * 2u32.pow(self.retried);
                self.retried += 1;
                Some(tokio::time::sleep(delay))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

/// A tower service driven with `ready` + `call`, as in the success path.
pub use crate::success_path::Tower;

/// tower: `RetryLayer` (the backoff policy above) → `ConcurrencyLimitLayer::new(8)`
/// → `TimeoutLayer::new(5 s)` over `service_fn`.
pub fn tower_stack() -> impl Service<(), Response = u32, Error = BoxError> + Clone + Send {
    ServiceBuilder::new()
        .layer(tower::retry::RetryLayer::new(RetryWithBackoff::default()))
        .layer(tower::limit::ConcurrencyLimitLayer::new(8))
        .layer(tower::timeout::TimeoutLayer::new(ATTEMPT_TIMEOUT))
        .service(tower::service_fn(|()| op()))
}

/// The error tower-resilience's nested layers produce here.
pub type TrFailureError = tower_resilience::bulkhead::BulkheadServiceError<
    tower_resilience::timelimiter::TimeLimiterError<io::Error>,
>;

/// tower-resilience 0.13: retry (3 attempts, exponential backoff from 500 ms)
/// → bulkhead (8, rejects when full) → time limiter (5 s) over `service_fn`.
pub fn tower_resilience_stack() -> impl Service<(), Response = u32, Error = TrFailureError> + Clone + Send {
    use tower_resilience::bulkhead::BulkheadLayer;
    use tower_resilience::retry::RetryLayer;
    use tower_resilience::timelimiter::TimeLimiterLayer;

    ServiceBuilder::new()
        .layer(
            RetryLayer::<(), u32, TrFailureError>::builder()
                .max_attempts(ATTEMPTS as usize)
                .exponential_backoff(FIRST_DELAY)
                .build(),
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

/// A current-thread runtime on the paused clock: a backoff wait parks, the
/// clock jumps to the timer, and the wait is over.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime")
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use tokio::time::Instant;

    use super::*;

    /// Every stack fails, after waiting on the paused clock.
    #[test]
    fn every_stack_fails_after_waiting_out_its_backoff() {
        let rt = paused_runtime();
        rt.block_on(async {
            let floor = Duration::from_millis(100);
            let start = Instant::now();
            assert_eq!(BallastFailing(ballast_policy()).call().await, 0);
            assert!(start.elapsed() >= floor, "ballast waited {:?}", start.elapsed());
            let start = Instant::now();
            assert_eq!(Tower(tower_stack()).call().await, 0);
            assert!(start.elapsed() >= floor, "tower waited {:?}", start.elapsed());
            let start = Instant::now();
            assert_eq!(Tower(tower_resilience_stack()).call().await, 0);
            assert!(start.elapsed() >= floor, "tower-resilience waited {:?}", start.elapsed());
        });
    }

    #[test]
    fn ballast_makes_exactly_three_attempts() {
        paused_runtime().block_on(async {
            let attempts = AtomicU32::new(0);
            let r = ballast_policy()
                .read(|_| {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    op()
                })
                .await;
            assert!(r.is_err());
            assert_eq!(attempts.load(Ordering::Relaxed), ATTEMPTS);
        });
    }
}
