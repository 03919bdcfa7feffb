//! Retry settings: how many attempts, which backoff, which budget.
//!
//! `max_attempts` **counts the first attempt** (R-RES-RE-3): 3 is typical, 5 is
//! the upper limit for in-memory retry, and anything longer belongs in the
//! durable task queue. Migration trap: cockatiel's `retry(…, { maxAttempts: 3 })`
//! counts *retries*, so it makes up to 4 attempts; the same intent here is
//! `Retry::attempts(4)`.

use crate::backoff::Backoff;
use crate::budget::Budget;
use crate::rules::{Rule, Violation};

/// The most attempts an in-memory retry may make (R-RES-RE-3).
pub const MAX_ATTEMPTS: u32 = 5;

/// Retry settings. Only reads and keyed writes are ever retried, and only on
/// transient errors; see [`Policy`](crate::Policy).
///
/// ```
/// use std::time::Duration;
/// use ballast::{Backoff, Retry};
///
/// let retry = Retry::attempts(3)
///     .backoff(Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::from_secs(2)));
/// assert_eq!(retry.max_attempts(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Retry {
    max_attempts: u32,
    /// The backoff between attempts (default: [`Backoff::default`]).
    #[setters(generate)]
    backoff: Backoff,
    /// The retry budget (on by default: 10 % of recent calls plus 10/s).
    #[setters(generate, strip_option)]
    budget: Option<Budget>,
}

impl Default for Retry {
    /// [`Retry::DEFAULT_ATTEMPTS`] attempts, the [default backoff](Backoff::default), the default budget.
    fn default() -> Self {
        Self::attempts(Self::DEFAULT_ATTEMPTS)
    }
}

impl Retry {
    /// The attempts of the default retry, the first included: the guide's typical 3.
    pub const DEFAULT_ATTEMPTS: u32 = 3;

    /// Up to `max_attempts` attempts, **the first included** (1..=5).
    pub fn attempts(max_attempts: u32) -> Self {
        Self { max_attempts, backoff: Backoff::default(), budget: Some(Budget::default()) }
    }

    /// No retry at all: one attempt, still through breaker, bulkhead and timeout.
    pub fn never() -> Self {
        Self::attempts(1)
    }

    /// Turns the retry budget off. Retries are then limited only by
    /// `max_attempts` and the breaker.
    #[must_use]
    pub fn without_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Attempts allowed, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The backoff.
    pub fn get_backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// The budget, if on.
    pub fn get_budget(&self) -> Option<&Budget> {
        self.budget.as_ref()
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        if self.max_attempts == 0 {
            out.push(Violation::error(
                Some(Rule::Re3),
                "retry.max_attempts",
                "max_attempts is 0: it counts the first attempt, so nothing would run".into(),
                "use 1 (no retry) to 5; 3 is typical",
            ));
        } else if self.max_attempts > MAX_ATTEMPTS {
            out.push(Violation::error(
                Some(Rule::Re3),
                "retry.max_attempts",
                format!(
                    "max_attempts is {}, over the in-memory limit of {MAX_ATTEMPTS} (it counts the first attempt)",
                    self.max_attempts
                ),
                "use 3 (typical) to 5 attempts and hand longer outages to the durable task queue",
            ));
        }
        self.backoff.check("retry.first_delay", "retry.max_delay", out);
        if let Some(budget) = &self.budget {
            budget.check(out);
        }
    }
}
