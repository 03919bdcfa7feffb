//! Events: every attempt, retry, give-up and state transition, delivered to
//! listeners (metrics, logs, tests).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{Class, OpKind, Rule, StopReason};

/// Something that happened in a policy of one external system.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// The external system the policy belongs to.
    pub system: &'a str,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// An attempt is about to run (it passed the breaker and the bulkhead).
    AttemptStarted {
        /// The operation's kind.
        op: OpKind,
        /// 1 for the first attempt.
        attempt: u32,
    },
    /// An attempt failed.
    AttemptFailed {
        /// The operation's kind.
        op: OpKind,
        /// 1 for the first attempt.
        attempt: u32,
        /// Whether asking again can help.
        class: Class,
        /// Whether the failure was the policy's own attempt timeout.
        timed_out: bool,
    },
    /// A retry will run after `delay`.
    RetryScheduled {
        /// The operation's kind.
        op: OpKind,
        /// The attempt that just failed.
        attempt: u32,
        /// The wait before the next attempt.
        delay: Duration,
    },
    /// The call stopped without success.
    GaveUp {
        /// The operation's kind.
        op: OpKind,
        /// Attempts that ran.
        attempts: u32,
        /// Why the call stopped.
        reason: StopReason,
    },
    /// The call succeeded.
    Succeeded {
        /// The operation's kind.
        op: OpKind,
        /// Attempts that ran, the successful one included.
        attempts: u32,
    },
    /// The breaker opened: calls fail fast until `half_open_in` has passed.
    BreakerOpened {
        /// Time until a probe is let through.
        half_open_in: Duration,
    },
    /// The breaker lets probe calls through.
    BreakerHalfOpened,
    /// The breaker closed: calls flow again.
    BreakerClosed,
    /// The breaker was isolated by hand: held open until reset.
    BreakerIsolated,
    /// The bulkhead was full (limit and queue) and refused a call.
    BulkheadRejected,
    /// The retry budget was empty, so a retry was not made.
    BudgetExhausted,
    /// The rate limit had no permit within its wait, so an attempt was not sent.
    RateLimited {
        /// Time until the next permit is due.
        retry_in: Duration,
    },
    /// An adaptive rate limit changed its rate (a throttle, or a rate the
    /// system announced).
    RateChanged {
        /// Permits a second from now on.
        rate: f64,
    },
    /// A retrying call started inside another policy's attempt, so it makes
    /// one attempt: retrying there would break `rule` (see
    /// [`StopReason::Nested`]).
    NestedRetryRefused {
        /// The operation's kind.
        op: OpKind,
        /// R-RES-RE-X4 (inside an outer retry), R-RES-CB-1 (inside an outer
        /// breaker) or R-RES-RE-2 (inside an outer bulkhead or timeout).
        rule: Rule,
    },
}

impl EventKind {
    /// A short stable name, e.g. `"retry_scheduled"`.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::AttemptStarted { .. } => "attempt_started",
            EventKind::AttemptFailed { .. } => "attempt_failed",
            EventKind::RetryScheduled { .. } => "retry_scheduled",
            EventKind::GaveUp { .. } => "gave_up",
            EventKind::Succeeded { .. } => "succeeded",
            EventKind::BreakerOpened { .. } => "breaker_opened",
            EventKind::BreakerHalfOpened => "breaker_half_opened",
            EventKind::BreakerClosed => "breaker_closed",
            EventKind::BreakerIsolated => "breaker_isolated",
            EventKind::BulkheadRejected => "bulkhead_rejected",
            EventKind::BudgetExhausted => "budget_exhausted",
            EventKind::RateLimited { .. } => "rate_limited",
            EventKind::RateChanged { .. } => "rate_changed",
            EventKind::NestedRetryRefused { .. } => "nested_retry_refused",
        }
    }
}

impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.system)?;
        match self.kind {
            EventKind::AttemptStarted { op, attempt } => write!(f, "{op} attempt {attempt} started"),
            EventKind::AttemptFailed { op, attempt, class, timed_out } => {
                let what = if timed_out { "timed out" } else { "failed" };
                write!(f, "{op} attempt {attempt} {what} ({})", class.as_str())
            }
            EventKind::RetryScheduled { op, attempt, delay } => {
                write!(f, "{op} retry after attempt {attempt} in {delay:.0?}")
            }
            EventKind::GaveUp { op, attempts, reason } => {
                write!(f, "{op} gave up after {attempts} attempt(s): {reason}")
            }
            EventKind::Succeeded { op, attempts } => write!(f, "{op} succeeded after {attempts} attempt(s)"),
            EventKind::BreakerOpened { half_open_in } => {
                write!(f, "breaker opened (half-open in {half_open_in:?})")
            }
            EventKind::BreakerHalfOpened => f.write_str("breaker half-opened"),
            EventKind::BreakerClosed => f.write_str("breaker closed"),
            EventKind::BreakerIsolated => f.write_str("breaker isolated"),
            EventKind::BulkheadRejected => f.write_str("bulkhead rejected a call"),
            EventKind::BudgetExhausted => f.write_str("retry budget exhausted"),
            EventKind::RateLimited { retry_in } => {
                write!(f, "rate limited an attempt (next permit in {retry_in:.0?})")
            }
            EventKind::RateChanged { rate } => write!(f, "rate limit now {rate:.2}/s"),
            EventKind::NestedRetryRefused { op, rule } => {
                write!(f, "{op} runs inside another policy's attempt: one attempt, no retries ({rule})")
            }
        }
    }
}

/// Receives a policy's events. Called inline on the calling task: keep it quick.
///
/// Any `Fn(&Event)` closure is a listener:
///
/// ```
/// use ballast::{Event, Policy};
/// let policy = Policy::builder("sms")
///     .listener(|e: &Event<'_>| println!("{e}"))
///     .build()
///     .unwrap();
/// ```
pub trait Listener: Send + Sync + 'static {
    /// Called once per event.
    fn on_event(&self, event: &Event<'_>);
}

impl<F: Fn(&Event<'_>) + Send + Sync + 'static> Listener for F {
    fn on_event(&self, event: &Event<'_>) {
        self(event)
    }
}

/// Delivers one system's events to its listeners; free when there are none.
#[derive(Clone)]
pub(crate) struct Emitter {
    system: Arc<str>,
    listeners: Arc<[Arc<dyn Listener>]>,
}

impl Emitter {
    pub(crate) fn new(system: Arc<str>, listeners: Vec<Arc<dyn Listener>>) -> Self {
        Self { system, listeners: listeners.into() }
    }

    pub(crate) fn system(&self) -> &Arc<str> {
        &self.system
    }

    #[inline]
    pub(crate) fn emit(&self, kind: EventKind) {
        if self.listeners.is_empty() {
            return;
        }
        let event = Event { system: &self.system, kind };
        for listener in self.listeners.iter() {
            listener.on_event(&event);
        }
    }
}

impl fmt::Debug for Emitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emitter")
            .field("system", &self.system)
            .field("listeners", &self.listeners.len())
            .finish()
    }
}
