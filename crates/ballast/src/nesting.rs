//! Policies nested in each other's attempts.
//!
//! One composition per system, retry outermost (R-RES-RE-2), and no retry
//! loop anywhere else (R-RES-RE-X4): yet nothing in the types stops an
//! operation from calling *another* policy's `read` or `write` — one
//! `.map_err` is enough. A retrying call inside an outer attempt puts retry
//! inside the outer breaker (R-RES-CB-1) or inside the outer retry
//! (R-RES-RE-X4: 1 call of 5 attempts around 1 of 5 makes 25).
//!
//! So every attempt marks the thread while its operation is polled, and a
//! call that starts under that mark makes exactly one attempt: it stops with
//! [`StopReason::Nested`](crate::StopReason::Nested), emits
//! [`EventKind::NestedRetryRefused`](crate::EventKind::NestedRetryRefused)
//! naming the rule, and leaves the retrying to the outer policy. Refusing
//! the inner retry rather than the call keeps working code working, with the
//! attempt count the guide allows.
//!
//! The mark follows the polling thread, as a task-local value would, but
//! costs one thread-local read and write per poll. Work the operation spawns
//! onto another task does not carry it.

use std::cell::Cell;

use crate::Rule;

thread_local! {
    /// The rule an inner retry would break, while an attempt's operation is polled.
    static OUTER: Cell<Option<Rule>> = const { Cell::new(None) };
}

/// The rule a retrying call would break inside an attempt of a policy
/// that retries (`retries`) and has a breaker (`breaker`).
pub(crate) fn rule_for(retries: bool, breaker: bool) -> Rule {
    if retries {
        Rule::ReX4
    } else if breaker {
        Rule::Cb1
    } else {
        // Inside the outer bulkhead and timeout: the composition upside down.
        Rule::Re2
    }
}

/// Marks the thread as polling an attempt until dropped, then restores the
/// previous mark (attempts nest).
pub(crate) struct Mark(Option<Rule>);

impl Mark {
    #[inline]
    pub(crate) fn enter(rule: Rule) -> Self {
        Mark(OUTER.with(|outer| outer.replace(Some(rule))))
    }
}

impl Drop for Mark {
    #[inline]
    fn drop(&mut self) {
        OUTER.with(|outer| outer.set(self.0));
    }
}

/// The rule an inner retry would break if this call runs inside an attempt.
#[inline]
pub(crate) fn outer() -> Option<Rule> {
    OUTER.with(Cell::get)
}
