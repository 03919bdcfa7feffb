//! The policy of one system together with what the HTTP integration adds to
//! it — deduplication by key, the key's header, `retry_on`, call metrics —
//! and the run of a call as its [`Plan`] says (R-RES-RE-1), shared by
//! [`HttpSystem`](crate::HttpSystem), [`PolicyLayer`](crate::PolicyLayer)
//! and `PolicyMiddleware`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use ballast::{AttemptContext, Classify, Failure, Judge, Policy};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use tokio::time::Instant;

use crate::metrics::CallMetrics;
use crate::plan::{Plan, Planner, SentOnce, NO_ROUTES};
use crate::routes::Unrouted;
use crate::{HttpError, RetryOn};

/// The policy of one system and what the HTTP integration adds to it.
#[derive(Debug)]
pub(crate) struct SystemPolicy {
    pub(crate) policy: Policy,
    pub(crate) dedupes_by_key: bool,
    pub(crate) header: HeaderName,
    pub(crate) retry_on: RetryOn,
    metrics: CallMetrics,
    warned: AtomicBool,
    calls: AtomicU64,
    attempts: AtomicU64,
    throttled: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<(SystemTime, String)>>,
}

/// What a system has done since it was built, for an operator's view; see
/// [`HttpSystem::stats`](crate::HttpSystem::stats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallStats {
    /// Calls made.
    pub calls: u64,
    /// Attempts made, the first of each call included.
    pub attempts: u64,
    /// Attempts the system answered 429 (too many requests).
    pub throttled: u64,
    /// Calls that ended refused by the policy — an open breaker, a full
    /// bulkhead, no rate-limit permit — their last attempt never sent.
    pub refused: u64,
    /// The last call that failed: when, and why.
    pub last_error: Option<(SystemTime, String)>,
}

impl SystemPolicy {
    pub(crate) fn new(policy: Policy, dedupes_by_key: bool, header: HeaderName, retry_on: RetryOn) -> Self {
        let metrics = CallMetrics::register(policy.name());
        Self {
            policy,
            dedupes_by_key,
            header,
            retry_on,
            metrics,
            warned: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// Calls, attempts and the last failure so far.
    pub(crate) fn stats(&self) -> CallStats {
        CallStats {
            calls: self.calls.load(Ordering::Relaxed),
            attempts: self.attempts.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            last_error: self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        }
    }

    /// Sets the idempotency header of a keyed write, whether or not it is
    /// retried: the system may still use it to deduplicate.
    pub(crate) fn set_key(&self, plan: &Plan<'_>, headers: &mut HeaderMap) -> Result<(), HttpError> {
        if let Some(key) = plan.operation().key() {
            let value = HeaderValue::from_str(key.as_str()).map_err(HttpError::invalid)?;
            headers.insert(self.header.clone(), value);
        }
        Ok(())
    }

    /// How this front end plans a call on its own (a layer, a middleware):
    /// without routes, by method and key ([`crate::plan`]).
    pub(crate) fn planner(&self) -> Planner<'static> {
        Planner { routes: &NO_ROUTES, unrouted: Unrouted::ByMethod, dedupes_by_key: self.dedupes_by_key }
    }

    /// Runs `op` as `plan` says — once, for the reason the plan gives
    /// ([`Plan::retried`]), or retried as the policy allows — with `judge`
    /// on its answers, counting attempts in flight and timing the whole call.
    pub(crate) async fn run<T, E, F, Fut, J>(
        &self,
        plan: &Plan<'_>,
        judge: J,
        mut op: F,
    ) -> Result<T, Failure<E>>
    where
        F: FnMut(AttemptContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify + std::fmt::Display,
        J: Judge<T>,
    {
        let started = Instant::now();
        self.calls.fetch_add(1, Ordering::Relaxed);
        let metrics = &self.metrics;
        let attempts = &self.attempts;
        let counted = |ctx| {
            attempts.fetch_add(1, Ordering::Relaxed);
            let in_flight = metrics.attempt_in_flight();
            // A map, not an async block: a block would keep the attempt's
            // future twice in its state (once captured, once awaited).
            futures_util::FutureExt::map(op(ctx), move |outcome| {
                drop(in_flight);
                outcome
            })
        };
        let once = plan.retried().err();
        if once == Some(SentOnce::NotDeduplicated) {
            self.warn_not_deduplicated();
        }
        let mut call = self.policy.call(plan.operation()).judged(judge);
        if let Some(why) = once {
            call = call.once(why.stop_reason());
        }
        let result = call.run(counted).await;
        metrics.call_took(started.elapsed());
        if let Err(failure) = &result {
            if matches!(failure, Failure::Rejected { .. }) {
                self.refused.fetch_add(1, Ordering::Relaxed);
            }
            *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((SystemTime::now(), failure.to_string()));
        }
        result
    }

    /// Counts an attempt the system answered 429.
    pub(crate) fn throttled(&self) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
    }

    /// Remembers a call that ended on a failed answer (a 503 after its
    /// attempts) as the system's last error, as a failure would be.
    pub(crate) fn answered_failure(&self, status: http::StatusCode) {
        let said = format!("the system answered {status}");
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some((SystemTime::now(), said));
    }

    fn warn_not_deduplicated(&self) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                system = %self.policy.name(),
                "keyed writes are sent with their {} header but attempted once: the system does not \
                 declare that it deduplicates by key, and retrying a write needs that guarantee, not just \
                 the header (R-RES-RE-1); set dedupes_by_key(true) if its contract keeps keys longer than \
                 the retry window",
                self.header,
            );
        }
    }
}
