//! What every clone of a policy shares and every call through it reads: the
//! settings, the breaker, bulkhead and budget state, the listeners, and the
//! jitter seed. Its own module so that the policy, which builds it, and the
//! call, which runs on it, both depend on it rather than on each other.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::breaker::CircuitBreaker;
use crate::budget::RetryBudget;
use crate::bulkhead::BulkheadState;
use crate::events::Emitter;
use crate::rate_limit::RateLimiter;
use crate::retry::Retry;
use crate::rules::{Rule, Violation};
use crate::timeout::Timeout;

/// The state of one policy that all its clones share.
pub(crate) struct PolicyState {
    pub(crate) retry: Retry,
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) bulkhead: Option<std::sync::Arc<BulkheadState>>,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) rate_limit: Option<RateLimiter>,
    pub(crate) timeout: Timeout,
    pub(crate) events: Emitter,
    pub(crate) worst_case: Duration,
    pub(crate) warnings: Vec<Violation>,
    /// The policy's jitter seed; each call draws its own from it.
    pub(crate) seed: u64,
    /// Calls made so far, to vary the seed from call to call.
    pub(crate) calls: AtomicU64,
    /// Whether the nesting warning was logged already.
    pub(crate) nested_warned: AtomicBool,
}

impl PolicyState {
    /// Logs, once per policy, that a retrying call ran inside another
    /// policy's attempt; the event says it every time.
    pub(crate) fn warn_nested(&self, rule: Rule) {
        if !self.nested_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                system = %self.events.system(),
                rule = rule.id(),
                "a retrying call of this policy runs inside another policy's attempt; it makes one \
                 attempt and the outer policy does the retrying ({rule}: {}). Call the two systems one \
                 after the other instead of one inside the other",
                rule.summary(),
            );
        }
    }

    /// A distinct, reproducible jitter seed per call.
    pub(crate) fn next_seed(&self) -> u64 {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        splitmix(self.seed ^ splitmix(n))
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
