//! One call through the composition: retry → breaker → bulkhead → timeout.
//!
//! The loop is the only retry mechanism there is (R-RES-RE-X4): every attempt
//! asks the breaker first, so an open breaker ends the call at once instead of
//! being waited out, then takes a bulkhead slot, then runs under its timeout.

use std::future::Future;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bulkhead::Refused;
use crate::events::EventKind;
use crate::outcome::{Rejection, StopReason, TimeoutKind};
use crate::policy::Inner;
use crate::timeout::{Attempt, AttemptDeadline, Strategy};
use crate::{Class, Classify, Context, Failure, IdempotencyKey, OpKind};

/// How the latest failed attempt ended.
enum LastFailure<E> {
    Error(E, Class),
    TimedOut(TimeoutKind),
}

impl<E> LastFailure<E> {
    fn into_failure(self, attempts: u32, stop: StopReason) -> Failure<E> {
        match self {
            LastFailure::Error(error, class) => Failure::Operation { error, class, attempts, stop },
            LastFailure::TimedOut(kind) => Failure::Timeout { kind, attempts, stop },
        }
    }

    fn into_error(self) -> Option<E> {
        match self {
            LastFailure::Error(e, _) => Some(e),
            LastFailure::TimedOut(_) => None,
        }
    }
}

pub(crate) async fn run<T, E, F, Fut>(
    inner: &Inner,
    kind: OpKind,
    key: Option<&IdempotencyKey>,
    cancel: Option<&CancellationToken>,
    mut op: F,
) -> Result<T, Failure<E>>
where
    F: FnMut(Context) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Classify,
{
    let events = &inner.events;
    let max_attempts = if kind.is_retryable() { inner.retry.max_attempts() } else { 1 };
    let deadline = inner.timeout.total_deadline().map(|t| Instant::now() + t);
    if let Some(budget) = &inner.budget {
        budget.deposit();
    }
    // Boxed: only a retry needs it, and the success path's future stays small.
    let mut delays: Option<Box<crate::Delays>> = None;
    let mut last: Option<LastFailure<E>> = None;
    let mut attempt: u32 = 0;
    let mut timer = None;
    let call_span = tracing::info_span!(
        "ballast.call",
        system = %events.system(),
        kind = kind.as_str(),
        attempts = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let gave_up = |attempts: u32, reason: StopReason| {
        call_span.record("attempts", attempts).record("outcome", reason.as_str());
        events.emit(EventKind::GaveUp { op: kind, attempts, reason });
    };

    let reject = |rejection: Rejection, attempts: u32, last: Option<LastFailure<E>>| {
        gave_up(attempts, StopReason::Rejected);
        Err(Failure::Rejected { rejection, attempts, last_error: last.and_then(LastFailure::into_error) })
    };

    loop {
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            gave_up(attempt, StopReason::Cancelled);
            return Err(Failure::Cancelled { attempts: attempt });
        }

        let admission = match inner.breaker.as_ref().map(|b| b.admit()).transpose() {
            Ok(a) => a,
            Err(rejection) => return reject(rejection, attempt, last),
        };
        let slot = match &inner.bulkhead {
            None => None,
            Some(bulkhead) => match bulkhead.try_acquire() {
                Some(slot) => Some(slot),
                None => match Box::pin(bulkhead.wait(deadline, cancel)).await {
                    Ok(slot) => Some(slot),
                    Err(Refused::Full) => {
                        events.emit(EventKind::BulkheadRejected);
                        return reject(Rejection::BulkheadFull, attempt, last);
                    }
                    Err(Refused::Deadline) => {
                        gave_up(attempt, StopReason::TotalTimeout);
                        let stop = StopReason::TotalTimeout;
                        return Err(Failure::Timeout { kind: TimeoutKind::Total, attempts: attempt, stop });
                    }
                    Err(Refused::Cancelled) => {
                        gave_up(attempt, StopReason::Cancelled);
                        return Err(Failure::Cancelled { attempts: attempt });
                    }
                },
            },
        };

        attempt += 1;
        events.emit(EventKind::AttemptStarted { op: kind, attempt });
        let attempt_token = match inner.timeout.strategy() {
            Strategy::Cooperative => {
                Some(cancel.map_or_else(CancellationToken::new, CancellationToken::child_token))
            }
            Strategy::Aggressive => None,
        };
        let ctx = Context {
            attempt,
            kind,
            key: key.cloned(),
            cancel: attempt_token.clone().or_else(|| cancel.cloned()),
        };
        let span = tracing::debug_span!(
            parent: &call_span,
            "ballast.attempt",
            attempt,
            outcome = tracing::field::Empty,
            class = tracing::field::Empty,
            next_delay_ms = tracing::field::Empty,
        );
        let result = AttemptDeadline::new(
            op(ctx),
            &inner.timeout,
            deadline,
            cancel.cloned(),
            attempt_token,
            &span,
            &mut timer,
        )
        .await;
        drop(slot);

        let failure = match result {
            Attempt::Done(Ok(value)) | Attempt::Drained(Ok(value), _) => {
                if let Some(a) = admission {
                    a.record(false);
                }
                span.record("outcome", "ok");
                call_span.record("attempts", attempt).record("outcome", "ok");
                events.emit(EventKind::Succeeded { op: kind, attempts: attempt });
                return Ok(value);
            }
            Attempt::Done(Err(error)) => {
                let c = error.classify();
                (LastFailure::Error(error, c.class), c.retry_after)
            }
            Attempt::TimedOut(which) | Attempt::Drained(Err(_), Some(which)) => {
                (LastFailure::TimedOut(which), None)
            }
            Attempt::Cancelled | Attempt::Drained(Err(_), None) => {
                drop(admission);
                gave_up(attempt, StopReason::Cancelled);
                return Err(Failure::Cancelled { attempts: attempt });
            }
        };
        let (failure, retry_after) = failure;
        let (class, timed_out) = match &failure {
            LastFailure::Error(_, class) => (*class, false),
            LastFailure::TimedOut(_) => (Class::Transient, true),
        };
        if let (Some(a), Some(b)) = (admission, inner.breaker.as_ref()) {
            a.record(b.config().is_failure(class));
        }
        span.record("outcome", if timed_out { "timeout" } else { "error" }).record("class", class.as_str());
        events.emit(EventKind::AttemptFailed { op: kind, attempt, class, timed_out });

        let stop = if class == Class::Permanent {
            Some(StopReason::Permanent)
        } else if matches!(failure, LastFailure::TimedOut(TimeoutKind::Total)) {
            Some(StopReason::TotalTimeout)
        } else if !kind.is_retryable() {
            Some(StopReason::NotRetryable)
        } else if attempt >= max_attempts {
            Some(StopReason::Exhausted)
        } else {
            None
        };
        if let Some(stop) = stop {
            gave_up(attempt, stop);
            return Err(failure.into_failure(attempt, stop));
        }
        // An open breaker ends the call now, before it spends budget or waits.
        if let Some(rejection) = inner.breaker.as_ref().and_then(|b| b.refusal()) {
            return reject(rejection, attempt, Some(failure));
        }
        if inner.budget.as_ref().is_some_and(|b| !b.try_withdraw()) {
            events.emit(EventKind::BudgetExhausted);
            gave_up(attempt, StopReason::BudgetExhausted);
            return Err(failure.into_failure(attempt, StopReason::BudgetExhausted));
        }

        let backoff = inner.retry.get_backoff();
        let mut delay = delays
            .get_or_insert_with(|| Box::new(backoff.delays(inner.next_seed())))
            .next()
            .unwrap_or(backoff.cap());
        if let Some(after) = retry_after {
            delay = delay.max(after);
        }
        let overruns = match deadline {
            Some(d) => Instant::now() + delay >= d,
            None => retry_after.is_some_and(|after| after > inner.worst_case),
        };
        if overruns {
            gave_up(attempt, StopReason::DeadlineWouldOverrun);
            return Err(failure.into_failure(attempt, StopReason::DeadlineWouldOverrun));
        }
        span.record("next_delay_ms", delay.as_millis() as u64);
        events.emit(EventKind::RetryScheduled { op: kind, attempt, delay });
        last = Some(failure);

        let wake_at = Instant::now() + delay;
        let sleep = match timer.as_mut() {
            Some(t) => {
                t.as_mut().reset(wake_at);
                t
            }
            None => timer.insert(Box::pin(tokio::time::sleep_until(wake_at))),
        };
        match cancel {
            None => sleep.await,
            Some(token) => {
                tokio::select! {
                    () = sleep => {}
                    () = token.cancelled() => {
                        gave_up(attempt, StopReason::Cancelled);
                        return Err(Failure::Cancelled { attempts: attempt });
                    }
                }
            }
        }
    }
}
