//! How a call through a policy can fail, split by what the caller must do.

use std::fmt;
use std::time::Duration;

use crate::{Class, Rule};

/// Why a call stopped without success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The error was permanent (R-RES-RE-X2): asking again cannot help.
    Permanent,
    /// Every allowed attempt failed (R-RES-RE-3).
    Exhausted,
    /// The operation may not be retried: a write without a key (R-RES-RE-X1).
    NotRetryable,
    /// A keyed write to a system that does not deduplicate by its key: one
    /// attempt, since the key alone does not make a retry safe (R-RES-RE-1).
    NotDeduplicated,
    /// The retry budget had no retry left for this system.
    BudgetExhausted,
    /// The next wait (backoff or the server's `Retry-After`) would overrun the
    /// total deadline or the in-memory window (R-RES-RE-4).
    DeadlineWouldOverrun,
    /// The total deadline passed.
    TotalTimeout,
    /// The breaker, the bulkhead or the rate limit refused the attempt
    /// ("system unavailable").
    Rejected,
    /// The caller cancelled the call.
    Cancelled,
    /// The call ran inside another policy's attempt, so it made one attempt:
    /// retrying there would put retry inside the outer breaker (R-RES-CB-1)
    /// or inside the outer retry (R-RES-RE-X4). The outer policy retries.
    Nested,
}

impl StopReason {
    /// A short stable label, e.g. `"budget_exhausted"`, for metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Permanent => "permanent",
            StopReason::Exhausted => "exhausted",
            StopReason::NotRetryable => "not_retryable",
            StopReason::NotDeduplicated => "not_deduplicated",
            StopReason::BudgetExhausted => "budget_exhausted",
            StopReason::DeadlineWouldOverrun => "deadline_would_overrun",
            StopReason::TotalTimeout => "total_timeout",
            StopReason::Rejected => "rejected",
            StopReason::Cancelled => "cancelled",
            StopReason::Nested => "nested",
        }
    }

    /// The rule that decided no further attempt would be made, where one did.
    pub const fn rule(self) -> Option<Rule> {
        match self {
            StopReason::Permanent => Some(Rule::ReX2),
            StopReason::Exhausted => Some(Rule::Re3),
            StopReason::NotRetryable => Some(Rule::ReX1),
            StopReason::NotDeduplicated => Some(Rule::Re1),
            StopReason::DeadlineWouldOverrun => Some(Rule::Re4),
            StopReason::Nested => Some(Rule::ReX4),
            _ => None,
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Permanent => "permanent error, not retried (R-RES-RE-X2)",
            StopReason::Exhausted => "all attempts used (R-RES-RE-3)",
            StopReason::NotRetryable => "a write without a key is not retried (R-RES-RE-X1)",
            StopReason::NotDeduplicated => {
                "not retried: the system does not deduplicate by the key (R-RES-RE-1)"
            }
            StopReason::BudgetExhausted => "budget exhausted",
            StopReason::DeadlineWouldOverrun => "next wait would overrun the deadline (R-RES-RE-4)",
            StopReason::TotalTimeout => "total deadline passed",
            StopReason::Rejected => "rejected: system unavailable",
            StopReason::Cancelled => "cancelled",
            StopReason::Nested => {
                "runs inside another policy's attempt, which does the retrying (R-RES-RE-X4, R-RES-CB-1)"
            }
        })
    }
}

/// Why the breaker, the bulkhead or the rate limit refused an attempt:
/// "system unavailable — fail fast". A rejection is never retried and never
/// waited out; nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The breaker is open; a probe is let through after `retry_in`.
    BreakerOpen {
        /// Time until the breaker lets a probe through.
        retry_in: Duration,
    },
    /// The breaker is half-open and its probes are all taken.
    BreakerHalfOpen {
        /// The longest wait until the next probe: the probes in flight either
        /// close the breaker sooner, or fail and open it for this long.
        retry_in: Duration,
    },
    /// The breaker was isolated by hand and stays open until reset.
    BreakerIsolated,
    /// The bulkhead's slots and queue are full.
    BulkheadFull,
    /// No permit of the system's rate limit within its wait; the next frees
    /// after `retry_in`.
    RateLimited {
        /// Time until a permit is due.
        retry_in: Duration,
    },
}

impl Rejection {
    /// When asking again may be let through, where the refusal says:
    /// the next breaker probe, the next rate-limit permit.
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            Rejection::BreakerOpen { retry_in }
            | Rejection::BreakerHalfOpen { retry_in }
            | Rejection::RateLimited { retry_in } => Some(*retry_in),
            Rejection::BreakerIsolated | Rejection::BulkheadFull => None,
        }
    }

    /// When [background](crate::background) work — a durable delivery of
    /// the refused call — may be let through: [`retry_in`](Self::retry_in),
    /// but no later than [`BACKGROUND_PROBE_AFTER`](crate::breaker::BACKGROUND_PROBE_AFTER)
    /// for an open breaker, which lets background work probe that soon, or
    /// a half-open one, whose probe's result comes within that. A
    /// write deferred by an open breaker is due then, not after the whole
    /// `half_open_after`.
    pub fn background_retry_in(&self) -> Option<Duration> {
        match self {
            Rejection::BreakerOpen { retry_in } | Rejection::BreakerHalfOpen { retry_in } => {
                Some((*retry_in).min(crate::breaker::BACKGROUND_PROBE_AFTER))
            }
            other => other.retry_in(),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::BreakerOpen { retry_in } => {
                write!(f, "circuit breaker open (next probe in {retry_in:?})")
            }
            Rejection::BreakerHalfOpen { retry_in } => {
                write!(f, "circuit breaker half-open, probes taken (retry in {retry_in:?})")
            }
            Rejection::BreakerIsolated => f.write_str("circuit breaker isolated"),
            Rejection::BulkheadFull => f.write_str("bulkhead full"),
            Rejection::RateLimited { retry_in } => write!(f, "rate limited (next permit in {retry_in:?})"),
        }
    }
}

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeoutKind {
    /// One attempt took longer than the attempt timeout.
    Attempt,
    /// The call's total deadline passed.
    Total,
}

/// A call through a [`Policy`](crate::Policy) that did not succeed.
///
/// The variants separate what a caller handles differently: a call refused
/// before anything was sent (the request itself is wrong), the operation's
/// own error (map it to a domain error), a timeout, a rejection ("system
/// unavailable", see [`Failure::is_unavailable`]), and cancellation.
#[derive(Debug)]
pub enum Failure<E> {
    /// Refused before any attempt, because the request itself is wrong:
    /// nothing was sent, and asking again gets the same refusal
    /// ([`Failure::unsent`]).
    Refused {
        /// Why.
        error: E,
    },
    /// The operation's own error, from its last attempt.
    Operation {
        /// The error the last attempt returned.
        error: E,
        /// Its class.
        class: Class,
        /// Attempts made.
        attempts: u32,
        /// Why no further attempt was made.
        stop: StopReason,
    },
    /// The last attempt timed out (a transient failure).
    Timeout {
        /// Which deadline passed.
        kind: TimeoutKind,
        /// Attempts made.
        attempts: u32,
        /// Why no further attempt was made.
        stop: StopReason,
    },
    /// The breaker, the bulkhead or the rate limit refused an attempt: the
    /// system is unavailable.
    Rejected {
        /// What refused it.
        rejection: Rejection,
        /// Attempts that ran before the refusal.
        attempts: u32,
        /// The error of the last attempt that ran, if any.
        last_error: Option<E>,
    },
    /// The caller cancelled the call.
    Cancelled {
        /// Attempts that ran (or were running).
        attempts: u32,
    },
}

impl<E> Failure<E> {
    /// A call refused before any attempt because the request itself is
    /// wrong: permanent, 0 attempts, nothing sent. For adapters that check a
    /// request before handing it to the policy.
    ///
    /// ```
    /// use ballast::{Failure, StopReason};
    ///
    /// let refused = Failure::unsent("invalid header value");
    /// assert!(matches!(refused, Failure::Refused { .. }));
    /// assert_eq!((refused.attempts(), refused.stop_reason()), (0, StopReason::Permanent));
    /// assert!(!refused.is_deferrable());
    /// ```
    pub fn unsent(error: E) -> Self {
        Failure::Refused { error }
    }

    /// Attempts made, including one cut short by a timeout or cancellation.
    pub fn attempts(&self) -> u32 {
        match self {
            Failure::Refused { .. } => 0,
            Failure::Operation { attempts, .. }
            | Failure::Timeout { attempts, .. }
            | Failure::Rejected { attempts, .. }
            | Failure::Cancelled { attempts } => *attempts,
        }
    }

    /// Why the call stopped.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            Failure::Refused { .. } => StopReason::Permanent,
            Failure::Operation { stop, .. } | Failure::Timeout { stop, .. } => *stop,
            Failure::Rejected { .. } => StopReason::Rejected,
            Failure::Cancelled { .. } => StopReason::Cancelled,
        }
    }

    /// "System unavailable — fail fast": the breaker, the bulkhead or the
    /// rate limit refused.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Failure::Rejected { .. })
    }

    /// Whether the call ended on a transient failure or a rejection, so the
    /// same keyed write may be handed to the durable queue. Permanent errors
    /// and cancellation are not deferrable.
    pub fn is_deferrable(&self) -> bool {
        match self {
            Failure::Operation { class, .. } => *class == Class::Transient,
            Failure::Timeout { .. } | Failure::Rejected { .. } => true,
            Failure::Refused { .. } | Failure::Cancelled { .. } => false,
        }
    }

    /// A short, low-cardinality name of what went wrong, for the
    /// OpenTelemetry attribute `error.type`: `"transient"` or `"permanent"`
    /// (the operation's own error), `"timeout"`, `"breaker_open"`,
    /// `"bulkhead_full"`, `"rate_limited"` or `"cancelled"`.
    pub fn error_type(&self) -> &'static str {
        match self {
            Failure::Refused { .. } => Class::Permanent.as_str(),
            Failure::Operation { class, .. } => class.as_str(),
            Failure::Timeout { .. } => "timeout",
            Failure::Rejected { rejection: Rejection::BulkheadFull, .. } => "bulkhead_full",
            Failure::Rejected { rejection: Rejection::RateLimited { .. }, .. } => "rate_limited",
            Failure::Rejected { .. } => "breaker_open",
            Failure::Cancelled { .. } => "cancelled",
        }
    }

    /// What refused the call, if it was refused.
    pub fn rejection(&self) -> Option<Rejection> {
        match self {
            Failure::Rejected { rejection, .. } => Some(*rejection),
            _ => None,
        }
    }

    /// The operation's own error, if the last attempt returned one, or why
    /// the call was refused.
    pub fn error(&self) -> Option<&E> {
        match self {
            Failure::Refused { error } | Failure::Operation { error, .. } => Some(error),
            Failure::Rejected { last_error, .. } => last_error.as_ref(),
            _ => None,
        }
    }

    /// Takes the operation's own error, if the last attempt returned one.
    pub fn into_error(self) -> Option<E> {
        match self {
            Failure::Refused { error } | Failure::Operation { error, .. } => Some(error),
            Failure::Rejected { last_error, .. } => last_error,
            _ => None,
        }
    }

    /// Maps the operation's error, keeping everything else.
    pub fn map_err<F, G: FnMut(E) -> F>(self, mut f: G) -> Failure<F> {
        match self {
            Failure::Refused { error } => Failure::Refused { error: f(error) },
            Failure::Operation { error, class, attempts, stop } => {
                Failure::Operation { error: f(error), class, attempts, stop }
            }
            Failure::Timeout { kind, attempts, stop } => Failure::Timeout { kind, attempts, stop },
            Failure::Rejected { rejection, attempts, last_error } => {
                Failure::Rejected { rejection, attempts, last_error: last_error.map(f) }
            }
            Failure::Cancelled { attempts } => Failure::Cancelled { attempts },
        }
    }
}

impl<E: fmt::Display> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused { error } => {
                write!(f, "{error} (permanent, 0 attempt(s); {})", StopReason::Permanent)
            }
            Failure::Operation { error, class, attempts, stop } => {
                write!(f, "{error} ({}, {attempts} attempt(s); {stop})", class.as_str())
            }
            Failure::Timeout { kind: TimeoutKind::Attempt, attempts, stop } => {
                write!(f, "attempt timed out ({attempts} attempt(s); {stop})")
            }
            Failure::Timeout { kind: TimeoutKind::Total, attempts, .. } => {
                write!(f, "total deadline passed after {attempts} attempt(s)")
            }
            Failure::Rejected { rejection, attempts, last_error } => {
                write!(f, "system unavailable: {rejection} after {attempts} attempt(s)")?;
                if let Some(e) = last_error {
                    write!(f, "; last error: {e}")?;
                }
                Ok(())
            }
            Failure::Cancelled { attempts } => write!(f, "cancelled after {attempts} attempt(s)"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Failure<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error().map(|e| e as &(dyn std::error::Error + 'static))
    }
}
