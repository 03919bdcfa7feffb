//! The guide's example composition for a payment gateway, part by part:
//! what a system gets for each part its configuration leaves out (a team
//! moving from the guide's cockatiel
//! `wrap(retry, circuitBreaker, bulkhead, timeout)` keeps every part).
//!
//! | part | value |
//! |---|---|
//! | retry | 3 attempts (the first included), jittered exponential backoff from ~500 ms, the default budget |
//! | breaker | count: opens at 50 % failures over the last 50 calls, a probe after 30 s |
//! | bulkhead | 8 attempts at once, 16 more waiting for a slot |
//! | timeout | 5 s per attempt, aggressive |
//!
//! ```
//! use ballast::guide;
//!
//! let policy = guide::policy("sber").build().unwrap();
//! assert_eq!(policy.retry().max_attempts(), 3);
//! assert_eq!(policy.bulkhead_limit(), Some(8));
//! ```

use std::time::Duration;

use crate::{Breaker, Bulkhead, PolicyBuilder, Retry, Timeout};

/// The breaker's share of failures that opens it.
pub const BREAKER_THRESHOLD: f64 = 0.5;
/// How many recent calls the breaker counts.
pub const BREAKER_SIZE: usize = 50;
/// Attempts at once.
pub const BULKHEAD_LIMIT: usize = 8;
/// Attempts that may wait for a slot.
pub const BULKHEAD_QUEUE: usize = 16;

/// 3 attempts with jittered exponential backoff (R-RES-RE-3, R-RES-RE-X3).
pub fn retry() -> Retry {
    Retry::attempts(Retry::DEFAULT_ATTEMPTS)
}

/// A count breaker: 50 % failures over the last 50 calls, half-open after 30 s.
pub fn breaker() -> Breaker {
    Breaker::count(BREAKER_THRESHOLD, BREAKER_SIZE).half_open_after(Breaker::DEFAULT_HALF_OPEN)
}

/// 8 attempts at once, 16 waiting.
pub fn bulkhead() -> Bulkhead {
    Bulkhead::new(BULKHEAD_LIMIT).queue(BULKHEAD_QUEUE)
}

/// 5 s per attempt, aggressive: a late attempt is abandoned.
pub fn timeout() -> Timeout {
    Timeout::aggressive(Duration::from_secs(5))
}

/// The whole composition for system `name`, in the one order (R-RES-RE-2).
pub fn policy(name: impl Into<String>) -> PolicyBuilder {
    crate::Policy::builder(name).retry(retry()).breaker(breaker()).bulkhead(bulkhead()).timeout(timeout())
}
