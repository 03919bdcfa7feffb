//! Timeouts: one per attempt, aggressive or cooperative, plus an optional
//! total deadline across every attempt and wait.
//!
//! The attempt timer is armed lazily: an attempt that finishes on its first
//! poll never reads the clock nor touches the timer wheel, so the success path
//! costs next to nothing. A call that does wait allocates one timer, which
//! every later attempt and backoff wait of the call reuses.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::nesting::Mark;
use crate::outcome::TimeoutKind;
use crate::rules::{Rule, Violation};

/// The instant `after` past `now`, or about thirty years out if that does not
/// fit: a huge `Retry-After` or deadline must not overflow the clock.
pub(crate) fn deadline_after(now: Instant, after: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    now.checked_add(after).unwrap_or_else(|| now + FAR)
}

/// What happens to an attempt that outlives its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The attempt's future is dropped at once: the policy stops waiting,
    /// whatever the attempt was doing. The guide's choice for HTTP calls.
    Aggressive,
    /// The attempt's cancellation token ([`AttemptContext::cancelled`](crate::AttemptContext::cancelled))
    /// fires and the policy awaits the attempt's own result. A success that
    /// arrives after the signal still counts as a success (its side effect
    /// happened); an error counts as a timeout.
    Cooperative,
}

/// Per-attempt timeout and optional total deadline.
///
/// ```
/// use std::time::Duration;
/// use ballast::Timeout;
///
/// // The guide's payment gateway: 5 s per attempt, attempt abandoned when late,
/// // and never more than 20 s for the whole call.
/// let t = Timeout::aggressive(Duration::from_secs(5)).total(Duration::from_secs(20));
/// assert_eq!(t.attempt(), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeout {
    attempt: Duration,
    strategy: Strategy,
    total: Option<Duration>,
}

impl Default for Timeout {
    /// [`Timeout::DEFAULT_ATTEMPT`] per attempt, aggressive, no total deadline.
    fn default() -> Self {
        Self::aggressive(Self::DEFAULT_ATTEMPT)
    }
}

impl Timeout {
    /// The attempt timeout of the default timeout: the guide's 5 s.
    pub const DEFAULT_ATTEMPT: Duration = Duration::from_secs(5);

    /// Each attempt gets `attempt`; a late attempt is dropped.
    pub const fn aggressive(attempt: Duration) -> Self {
        Self { attempt, strategy: Strategy::Aggressive, total: None }
    }

    /// Each attempt gets `attempt`; a late attempt is signalled and awaited.
    pub const fn cooperative(attempt: Duration) -> Self {
        Self { attempt, strategy: Strategy::Cooperative, total: None }
    }

    /// A deadline for the whole call: attempts, bulkhead queueing and backoff
    /// waits together. A retry whose wait would overrun it is not made.
    pub const fn total(mut self, total: Duration) -> Self {
        self.total = Some(total);
        self
    }

    /// The per-attempt timeout.
    pub fn attempt(&self) -> Duration {
        self.attempt
    }

    /// Aggressive or cooperative.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The total deadline, if any.
    pub fn total_deadline(&self) -> Option<Duration> {
        self.total
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        if self.attempt.is_zero() {
            out.push(Violation::error(
                None,
                "timeout.attempt",
                "the attempt timeout is zero: no attempt could ever finish".into(),
                "give each attempt a few seconds, e.g. 5 s",
            ));
        }
        if self.total.is_some_and(|t| t.is_zero()) {
            out.push(Violation::error(
                None,
                "timeout.total",
                "the total deadline is zero: no call could ever finish".into(),
                "leave it unset or make it longer than one attempt",
            ));
        }
    }
}

/// How an attempt run under [`AttemptDeadline`] ended.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    /// The attempt returned (success or its own error).
    Done(T),
    /// A timeout fired (and, when cooperative, the attempt then failed).
    TimedOut(TimeoutKind),
    /// The caller cancelled.
    Cancelled,
    /// Cooperative: the attempt returned after it was signalled to stop
    /// (`Some` timeout, or `None` for the caller's cancellation).
    Drained(T, Option<TimeoutKind>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Cooperative: the attempt was signalled and we await its own result.
    Draining(Option<TimeoutKind>),
}

pin_project! {
    /// Runs one attempt under its timeout, the total deadline and the caller's
    /// cancellation, arming the timer only if the attempt does not finish at
    /// once.
    pub(crate) struct AttemptDeadline<'s, F> {
        #[pin]
        fut: F,
        span: Option<&'s tracing::Span>,
        timer: &'s mut Option<Pin<Box<Sleep>>>,
        armed: bool,
        cancelled: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
        timeout: &'s Timeout,
        total: &'s Option<Instant>,
        caller: Option<&'s CancellationToken>,
        attempt_token: Option<CancellationToken>,
        phase: Phase,
        // What a retrying call started by the operation would break.
        nested: Rule,
    }
}

impl<'s, F> AttemptDeadline<'s, F> {
    pub(crate) fn new(
        fut: F,
        timeout: &'s Timeout,
        total: &'s Option<Instant>,
        caller: Option<&'s CancellationToken>,
        attempt_token: Option<CancellationToken>,
        span: Option<&'s tracing::Span>,
        timer: &'s mut Option<Pin<Box<Sleep>>>,
    ) -> Self {
        Self {
            fut,
            span,
            timer,
            armed: false,
            cancelled: None,
            timeout,
            total,
            caller,
            attempt_token,
            phase: Phase::Running,
            nested: Rule::Re2,
        }
    }

    /// The rule a retrying call started inside this attempt would break.
    pub(crate) fn nested(mut self, rule: Rule) -> Self {
        self.nested = rule;
        self
    }
}

impl<T, F: Future<Output = T>> Future for AttemptDeadline<'_, F> {
    type Output = Attempt<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _entered = this.span.map(tracing::Span::enter);
        if let Poll::Ready(v) = poll_marked(this.fut.as_mut(), cx, *this.nested) {
            return Poll::Ready(match *this.phase {
                Phase::Running => Attempt::Done(v),
                Phase::Draining(stop) => Attempt::Drained(v, stop),
            });
        }
        if let Phase::Draining(_) = *this.phase {
            return Poll::Pending;
        }
        if !*this.armed {
            *this.armed = true;
            let attempt_end = deadline_after(Instant::now(), this.timeout.attempt);
            let end = this.total.map_or(attempt_end, |t| t.min(attempt_end));
            match this.timer.as_mut() {
                Some(timer) => timer.as_mut().reset(end),
                None => **this.timer = Some(Box::pin(tokio::time::sleep_until(end))),
            }
            if let Some(caller) = *this.caller {
                *this.cancelled = Some(Box::pin(caller.clone().cancelled_owned()));
            }
        }
        let stop = if let Some(cancelled) = this.cancelled.as_mut() {
            cancelled.as_mut().poll(cx).map(|()| None)
        } else {
            Poll::Pending
        };
        let stop = match stop {
            Poll::Ready(s) => s,
            Poll::Pending => {
                if let Some(timer) = this.timer.as_mut() {
                    ready!(timer.as_mut().poll(cx));
                }
                let total_first = this.total.is_some_and(|t| t <= Instant::now());
                Some(if total_first { TimeoutKind::Total } else { TimeoutKind::Attempt })
            }
        };
        match (this.timeout.strategy, this.attempt_token.as_ref()) {
            (Strategy::Cooperative, Some(token)) => {
                token.cancel();
                *this.phase = Phase::Draining(stop);
                poll_marked(this.fut, cx, *this.nested).map(|v| Attempt::Drained(v, stop))
            }
            _ => Poll::Ready(stop.map_or(Attempt::Cancelled, Attempt::TimedOut)),
        }
    }
}

/// Polls an attempt's operation with the thread marked as inside an attempt,
/// so a retrying call it makes runs once (see the `nesting` module).
#[inline]
fn poll_marked<F: Future>(fut: Pin<&mut F>, cx: &mut Context<'_>, nested: Rule) -> Poll<F::Output> {
    let _mark = Mark::enter(nested);
    fut.poll(cx)
}
