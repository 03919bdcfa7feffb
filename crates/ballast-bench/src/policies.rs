//! The guide's policies, as every comparison of this crate builds them: the
//! success path, the failure path and the contention bin measure the same
//! ones.

use std::time::Duration;

use ballast::{Breaker, Bulkhead, Policy, RateLimit, Retry, Timeout};

/// The attempt timeout every stack that has one uses.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// The guide's policy: retry 3 attempts (default budget, exponential backoff
/// from 500 ms) → count breaker 50 % over 50 → bulkhead 8 → aggressive 5 s
/// attempt timeout.
pub fn ballast_full() -> Policy {
    Policy::builder("bench")
        .retry(Retry::attempts(3))
        .breaker(Breaker::count(0.5, 50))
        .bulkhead(Bulkhead::new(8))
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .build()
        .expect("the guide's policy builds")
}

/// The guide's policy with a rate limit that never refuses (a million
/// permits a second and a burst of four billion): what a permit costs on
/// the success path.
pub fn ballast_full_rate_limited() -> Policy {
    Policy::builder("bench")
        .retry(Retry::attempts(3))
        .breaker(Breaker::count(0.5, 50))
        .bulkhead(Bulkhead::new(8))
        .rate_limit(RateLimit::per_second(1_000_000).burst(u32::MAX))
        .timeout(Timeout::aggressive(ATTEMPT_TIMEOUT))
        .build()
        .expect("the guide's policy with a rate limit builds")
}
