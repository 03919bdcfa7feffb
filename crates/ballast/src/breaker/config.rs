//! [`Breaker`]: a circuit breaker's settings — its kind (consecutive
//! failures, a count window, a sampling window), when it half-opens, and
//! its scope — checked before a policy is built. The breaker that runs on
//! them is [`CircuitBreaker`](super::CircuitBreaker).

use std::time::Duration;

use crate::backoff::Backoff;
use crate::rules::Violation;
use crate::Class;

/// How long an open breaker waits before letting a probe through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalfOpenAfter {
    /// Always the same wait.
    Fixed(Duration),
    /// A wait that grows each time the breaker re-opens without closing in
    /// between (reset when it closes).
    Backoff(Backoff),
}

impl From<Duration> for HalfOpenAfter {
    fn from(d: Duration) -> Self {
        HalfOpenAfter::Fixed(d)
    }
}

impl From<Backoff> for HalfOpenAfter {
    fn from(b: Backoff) -> Self {
        HalfOpenAfter::Backoff(b)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Consecutive { n: u32 },
    Count { threshold: f64, size: usize, min_calls: Option<usize> },
    Sampling { threshold: f64, period: Duration, min_throughput: u64 },
}

/// Circuit breaker settings.
///
/// ```
/// use std::time::Duration;
/// use ballast::Breaker;
///
/// // The guide's payment gateway: opens at 50 % failures over the last 50
/// // attempts, lets a probe through after 30 s.
/// let b = Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30));
/// # let _ = b;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Breaker {
    pub(super) kind: Kind,
    /// Wait before a probe: a [`Duration`] or a [`Backoff`] (default [`Breaker::DEFAULT_HALF_OPEN`]).
    #[setters(generate, into)]
    pub(super) half_open_after: HalfOpenAfter,
    /// Probe calls admitted while half-open (default 1); all must succeed to close.
    #[setters(generate)]
    pub(super) probes: u32,
    /// Count permanent errors as failures too. By default a permanent error
    /// means the system answered, which is a success for the breaker.
    #[setters(generate)]
    pub(super) permanent_is_failure: bool,
    /// The replicas of a fleet hold this breaker together: it opens on
    /// every replica once this many see the system failing, and one replica
    /// at a time probes (kept by `ballast-fleet`; without it each replica
    /// keeps its own breaker, as without the setting).
    #[setters(generate, strip_option, rename = "fleet")]
    pub(super) quorum: Option<u32>,
}

impl Breaker {
    /// How long an open breaker waits before a probe unless
    /// [`half_open_after`](Breaker::half_open_after) says otherwise: 30 s.
    pub const DEFAULT_HALF_OPEN: Duration = Duration::from_secs(30);

    /// The calls a [`sampling`](Breaker::sampling) breaker needs in its period
    /// before it may open, unless [`min_throughput`](Breaker::min_throughput) says otherwise.
    pub const DEFAULT_MIN_THROUGHPUT: u64 = 20;

    /// The largest window a count breaker may keep (its bits are allocated up front).
    pub const MAX_COUNT_WINDOW: usize = 1_000_000;

    fn with(kind: Kind) -> Self {
        Self {
            kind,
            half_open_after: HalfOpenAfter::Fixed(Self::DEFAULT_HALF_OPEN),
            probes: 1,
            permanent_is_failure: false,
            quorum: None,
        }
    }

    /// The quorum of a breaker the fleet holds ([`fleet`](Self::fleet)).
    pub fn fleet_quorum(&self) -> Option<u32> {
        self.quorum
    }

    /// Opens after `n` failures in a row.
    pub fn consecutive(n: u32) -> Self {
        Self::with(Kind::Consecutive { n })
    }

    /// Opens when, over the last `size` outcomes, failures exceed
    /// `threshold · total` and `total ≥ min_calls` (default `size`).
    ///
    /// Exact on one thread. Across threads, successes enter the window in
    /// per-thread batches of `size / 8` (1 to 16), so that calls on different
    /// cores do not all write one shared counter: the window a failure is
    /// judged on may lack up to `batch − 1` recent successes of each other
    /// thread. Failures are never delayed, so a system that fails every call
    /// still opens the breaker within one window.
    pub fn count(threshold: f64, size: usize) -> Self {
        Self::with(Kind::Count { threshold, size, min_calls: None })
    }

    /// Opens when, over the last `period`, failures exceed `threshold · calls`
    /// and at least [`min_throughput`](Breaker::min_throughput) calls were
    /// seen (default [`Breaker::DEFAULT_MIN_THROUGHPUT`]).
    pub fn sampling(threshold: f64, period: Duration) -> Self {
        Self::with(Kind::Sampling { threshold, period, min_throughput: Self::DEFAULT_MIN_THROUGHPUT })
    }

    /// For [`Breaker::count`]: outcomes needed before it may open.
    #[must_use]
    pub fn min_calls(mut self, min_calls: usize) -> Self {
        if let Kind::Count { min_calls: m, .. } = &mut self.kind {
            *m = Some(min_calls);
        }
        self
    }

    /// For [`Breaker::sampling`]: calls in the period needed before it may open.
    #[must_use]
    pub fn min_throughput(mut self, calls: u64) -> Self {
        if let Kind::Sampling { min_throughput, .. } = &mut self.kind {
            *min_throughput = calls;
        }
        self
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        let threshold_ok = |t: f64| t > 0.0 && t <= 1.0;
        match self.kind {
            Kind::Consecutive { n: 0 } => out.push(Violation::error(
                None,
                "breaker.threshold",
                "a consecutive breaker with threshold 0 would never close".into(),
                "open after a few failures in a row, e.g. 5",
            )),
            Kind::Count { threshold, size, min_calls } => {
                if !threshold_ok(threshold) {
                    out.push(threshold_violation(threshold));
                }
                if size == 0 {
                    out.push(Violation::error(
                        None,
                        "breaker.size",
                        "the count breaker's window size is 0".into(),
                        "count over the last calls, e.g. size = 50",
                    ));
                } else if size > Breaker::MAX_COUNT_WINDOW {
                    out.push(Violation::error(
                        None,
                        "breaker.size",
                        format!("the count breaker's window size {size} is over {}", Breaker::MAX_COUNT_WINDOW),
                        "a window of a few dozen to a few thousand calls is enough; use a sampling breaker for more",
                    ));
                }
                if min_calls.is_some_and(|m| m == 0 || m > size) {
                    out.push(Violation::error(
                        None,
                        "breaker.min_calls",
                        format!("min_calls {} is outside 1..={size}", min_calls.unwrap_or(0)),
                        "use a value from 1 to size (default size)",
                    ));
                }
            }
            Kind::Sampling { threshold, period, .. } => {
                if !threshold_ok(threshold) {
                    out.push(threshold_violation(threshold));
                }
                if period.is_zero() {
                    out.push(Violation::error(
                        None,
                        "breaker.duration",
                        "the sampling period is zero".into(),
                        "sample over several seconds, e.g. 30 s",
                    ));
                }
            }
            Kind::Consecutive { .. } => {}
        }
        match self.half_open_after {
            HalfOpenAfter::Fixed(d) if d.is_zero() => out.push(Violation::error(
                None,
                "breaker.half_open_after",
                "half_open_after is zero: an open breaker would never hold back any call".into(),
                "wait before probing, e.g. 30 s",
            )),
            HalfOpenAfter::Backoff(b) => b.check("breaker.half_open_after", "breaker.half_open_after", out),
            HalfOpenAfter::Fixed(_) => {}
        }
        if self.quorum == Some(0) {
            out.push(Violation::error(
                None,
                "breaker.quorum",
                "a quorum of 0 replicas would open the fleet's breaker with no failure seen".into(),
                "open the fleet when a few replicas see the system failing, e.g. quorum = 2",
            ));
        }
        if self.probes == 0 {
            out.push(Violation::error(
                None,
                "breaker.probes",
                "0 probes: a half-open breaker could never close".into(),
                "admit at least 1 probe",
            ));
        }
    }

    /// Whether an outcome of this class counts as a failure.
    pub(crate) fn is_failure(&self, class: Class) -> bool {
        class == Class::Transient || self.permanent_is_failure
    }
}

pub(super) fn threshold_violation(threshold: f64) -> Violation {
    Violation::error(
        None,
        "breaker.threshold",
        format!("the failure threshold {threshold} is outside (0, 1]"),
        "use a share of failures, e.g. 0.5 for 50 %",
    )
}
