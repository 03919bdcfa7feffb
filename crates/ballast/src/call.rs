//! One call through the composition: retry → breaker → bulkhead and rate
//! limit → timeout.
//!
//! The loop is the only retry mechanism there is (R-RES-RE-X4): every attempt
//! asks the breaker first, so an open breaker ends the call at once instead of
//! being waited out, then takes a bulkhead slot and a rate-limit permit, then
//! runs under its timeout.
//!
//! The first attempt runs inline; only a call that needs a retry moves on to
//! the retry loop, which is boxed. That keeps the future of a call small —
//! callers move it around before polling it — and the success path free of
//! allocations.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use crate::bulkhead::Refused;
use crate::events::EventKind;
use crate::nesting;
use crate::outcome::{Rejection, StopReason, TimeoutKind};
use crate::policy_state::PolicyState;
use crate::rate_limit::Grant;
use crate::timeout::{deadline_after, Attempt, AttemptDeadline, Strategy};
use crate::{AttemptContext, Class, Classify, Failure, IdempotencyKey, Judge, OpKind, Operation, Rule};

/// Whether anyone collects tracing spans. Without a subscriber a disabled
/// span still costs: when a dependency turns on `tracing`'s `log` feature
/// (sqlx does), creating, recording and dropping it go through the `log`
/// fallback, which on the success path costs more than the rest of the call.
fn tracing_is_on() -> bool {
    tracing::dispatcher::has_been_set()
}

/// A span made only when a subscriber collects spans, and boxed: a
/// `tracing::Span` is 40 bytes, and the call's future would carry two (the
/// call's and the attempt's) that nobody reads without a subscriber; this is
/// 8. Boxing costs nothing without a subscriber and little beside one.
#[derive(Default)]
struct MaybeSpan(Option<Box<tracing::Span>>);

impl MaybeSpan {
    fn new(make: impl FnOnce() -> tracing::Span) -> Self {
        if !tracing_is_on() {
            return Self(None);
        }
        // A subscriber whose layers want no spans (a log of events only)
        // makes a disabled span: nothing to keep, nothing to box.
        let span = make();
        Self((!span.is_disabled()).then(|| Box::new(span)))
    }

    fn get(&self) -> Option<&tracing::Span> {
        self.0.as_deref()
    }

    fn record<V: tracing::field::Value>(&self, field: &str, value: V) -> &Self {
        if let Some(span) = self.get() {
            span.record(field, value);
        }
        self
    }
}

/// How a failed attempt ended.
enum LastFailure<T, E> {
    Error(E, Class),
    TimedOut(TimeoutKind),
    /// An answer the judge found a failure (a 503): kept as the answer.
    Answered(T, Class),
}

impl<T, E> LastFailure<T, E> {
    /// The call's result when this failure ends it: a failure, or the
    /// last answer as it came.
    fn end(self, attempts: u32, stop: StopReason) -> Result<T, Failure<E>> {
        match self {
            LastFailure::Error(error, class) => Err(Failure::Operation { error, class, attempts, stop }),
            LastFailure::TimedOut(kind) => Err(Failure::Timeout { kind, attempts, stop }),
            LastFailure::Answered(answer, _) => Ok(answer),
        }
    }

    fn into_error(self) -> Option<E> {
        match self {
            LastFailure::Error(e, _) => Some(e),
            LastFailure::TimedOut(_) | LastFailure::Answered(..) => None,
        }
    }

    fn class(&self) -> Class {
        match self {
            LastFailure::Error(_, class) | LastFailure::Answered(_, class) => *class,
            LastFailure::TimedOut(_) => Class::Transient,
        }
    }

    /// The `error.type` of a call this failure ends.
    fn error_type(&self) -> &'static str {
        match self {
            LastFailure::Error(_, class) | LastFailure::Answered(_, class) => class.as_str(),
            LastFailure::TimedOut(_) => "timeout",
        }
    }
}

/// How one attempt ended, as far as the retry loop is concerned.
enum Step<T, E> {
    Succeeded(T),
    /// The call is over: a failure, or an answer it ends on.
    Stopped(Result<T, Failure<E>>),
    /// The attempt failed; the loop decides whether to retry.
    Failed {
        failure: LastFailure<T, E>,
        retry_after: Option<Duration>,
        span: MaybeSpan,
    },
}

/// What every attempt of one call shares.
struct Call<'a, F, J> {
    inner: &'a PolicyState,
    kind: OpKind,
    key: Option<&'a IdempotencyKey>,
    /// Why the call makes one attempt, if it does: a write without a key
    /// (R-RES-RE-X1), or whatever its caller's plan said.
    once: Option<StopReason>,
    cancel: Option<&'a CancellationToken>,
    op: F,
    /// Which successful results are failures all the same (see [`Judge`]).
    judge: J,
    deadline: Option<Instant>,
    /// Until when the first attempt of [paced](crate::background_within)
    /// work may wait for its slot and permit; the deadline is set once it
    /// has them.
    admit_by: Option<Instant>,
    /// One timer per call, armed only when something has to wait.
    timer: Option<Pin<Box<Sleep>>>,
    span: MaybeSpan,
    /// Set when the call runs inside another policy's attempt: the rule its
    /// retries would break, so it makes one attempt (see `nesting`).
    nested: Option<Rule>,
}

pub(crate) fn run<'a, T, E, F, Fut, J>(
    inner: &'a PolicyState,
    operation: Operation<'a>,
    once: Option<StopReason>,
    cancel: Option<&'a CancellationToken>,
    judge: J,
    op: F,
) -> impl Future<Output = Result<T, Failure<E>>> + 'a
where
    F: FnMut(AttemptContext) -> Fut + 'a,
    Fut: Future<Output = Result<T, E>> + 'a,
    E: Classify + 'a,
    T: 'a,
    J: Judge<T> + 'a,
{
    let mut call = Call {
        inner,
        kind: operation.kind(),
        key: operation.key(),
        once: once.or((!operation.kind().is_retryable()).then_some(StopReason::NotRetryable)),
        cancel,
        op,
        judge,
        deadline: None,
        admit_by: None,
        timer: None,
        span: MaybeSpan::default(),
        nested: None,
    };
    // An async block rather than an async fn: it uses `call` in place, where
    // an async fn would keep a second copy of its arguments in its state.
    async move {
        if let Some(budget) = &call.inner.budget {
            budget.deposit();
        }
        if let Some(rule) = nesting::outer() {
            call.refuse_nested_retry(rule);
        }
        match crate::background::current() {
            Some(Some(until)) => call.admit_by = Some(until),
            _ => call.start_deadline(),
        }
        // Field names follow the OpenTelemetry conventions where one
        // applies (`error.type`, `otel.status_code`), `ballast.*` otherwise.
        call.span = MaybeSpan::new(|| {
            tracing::info_span!(
                "ballast.call",
                ballast.system = %call.inner.events.system(),
                ballast.kind = call.kind.as_str(),
                ballast.attempts = tracing::field::Empty,
                ballast.stop_reason = tracing::field::Empty,
                ballast.rule = tracing::field::Empty,
                error.type = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            )
        });
        // Unpacked before the next await, so the step does not stay in the
        // call's state.
        let (failure, retry_after, span) = match call.attempt(1).await {
            Step::Succeeded(value) => return Ok(value),
            Step::Stopped(result) => return result,
            Step::Failed { failure, retry_after, span } => (failure, retry_after, span),
        };
        Box::pin(call.retry_loop(failure, retry_after, span)).await
    }
}

impl<F, J> Call<'_, F, J> {
    /// This call runs inside another policy's attempt: if it would retry,
    /// it makes one attempt instead and says which rule retrying would break.
    #[cold]
    fn refuse_nested_retry(&mut self, rule: Rule) {
        if self.once.is_some() || self.inner.retry.max_attempts() <= 1 {
            return;
        }
        self.nested = Some(rule);
        self.inner.events.emit(EventKind::NestedRetryRefused { op: self.kind, rule });
        self.inner.warn_nested(rule);
    }

    /// The rule a retrying call started by this call's operation would break.
    fn mark(&self) -> Rule {
        let retries = self.nested.is_none() && self.once.is_none() && self.inner.retry.max_attempts() > 1;
        self.nested.unwrap_or_else(|| nesting::rule_for(retries, self.inner.breaker.is_some()))
    }

    fn gave_up<E>(&self, failure: Failure<E>) -> Failure<E> {
        self.record_stop(failure.attempts(), failure.stop_reason(), failure.error_type());
        failure
    }

    /// Ends the call on `failure` after `attempts`, for `stop`.
    fn ended<T, E>(
        &self,
        failure: LastFailure<T, E>,
        attempts: u32,
        stop: StopReason,
    ) -> Result<T, Failure<E>> {
        self.record_stop(attempts, stop, failure.error_type());
        failure.end(attempts, stop)
    }

    fn record_stop(&self, attempts: u32, reason: StopReason, error_type: &'static str) {
        if self.span.get().is_some() {
            self.span
                .record("ballast.attempts", i64::from(attempts))
                .record("ballast.stop_reason", reason.as_str())
                .record("error.type", error_type)
                .record("otel.status_code", "ERROR");
            if let Some(rule) = reason.rule() {
                self.span.record("ballast.rule", rule.id());
            }
        }
        self.inner.events.emit(EventKind::GaveUp { op: self.kind, attempts, reason });
    }

    fn rejected<T, E>(
        &self,
        rejection: Rejection,
        attempts: u32,
        last: Option<LastFailure<T, E>>,
    ) -> Failure<E> {
        let last_error = last.and_then(LastFailure::into_error);
        self.gave_up(Failure::Rejected { rejection, attempts, last_error })
    }

    /// Attempt `n` through breaker → bulkhead and rate limit → timeout. A rejection carries
    /// no error here; the retry loop adds the previous attempt's.
    async fn attempt<T, E, Fut>(&mut self, n: u32) -> Step<T, E>
    where
        F: FnMut(AttemptContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
        J: Judge<T>,
    {
        let (inner, done) = (self.inner, n - 1);
        if self.cancel.is_some_and(CancellationToken::is_cancelled) {
            return Step::Stopped(Err(self.gave_up(Failure::Cancelled { attempts: done })));
        }
        let admission = match inner.breaker.as_ref().map(|b| b.admit()).transpose() {
            Ok(a) => a,
            Err(rejection) => return Step::Stopped(Err(self.rejected::<T, E>(rejection, done, None))),
        };
        let background = crate::background::current();
        // Paced work (`background_within`) waits its turn in the rate
        // limit's line; plain background work only waits for a slot.
        let paced = matches!(background, Some(Some(_)));
        let background = background.is_some();
        // Paced work's first attempt waits its turn until its own bound;
        // every other wait is bounded by the call's deadline.
        let wait_by = self.admit_by.or(self.deadline);
        let slot = match &inner.bulkhead {
            None => None,
            Some(bulkhead) => {
                let acquired = if background {
                    Box::pin(bulkhead.wait_background(wait_by, self.cancel)).await
                } else if let Some(slot) = bulkhead.try_acquire() {
                    Ok(slot)
                } else {
                    Box::pin(bulkhead.wait(self.deadline, self.cancel)).await
                };
                match acquired {
                    Ok(slot) => Some(slot),
                    Err(Refused::Full) => {
                        inner.events.emit(EventKind::BulkheadRejected);
                        return Step::Stopped(Err(self.rejected::<T, E>(
                            Rejection::BulkheadFull,
                            done,
                            None,
                        )));
                    }
                    Err(Refused::Deadline) => {
                        let stop = StopReason::TotalTimeout;
                        let timeout = Failure::Timeout { kind: TimeoutKind::Total, attempts: done, stop };
                        return Step::Stopped(Err(self.gave_up(timeout)));
                    }
                    Err(Refused::Cancelled) => {
                        return Step::Stopped(Err(self.gave_up(Failure::Cancelled { attempts: done })));
                    }
                }
            }
        };

        if let Some(limiter) = &inner.rate_limit {
            // Never a wait past the total deadline: the permit is not taken then.
            let room = wait_by.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
            let (grant, place) = if paced {
                // In line behind the backlog, as long as its bound allows.
                let paced = match self.cancel {
                    None => Box::pin(limiter.take_paced(room)).await.map(Some),
                    Some(token) => tokio::select! {
                        paced = Box::pin(limiter.take_paced(room)) => paced.map(Some),
                        () = token.cancelled() => Some(None),
                    },
                };
                match paced {
                    Some(Some((grant, place))) => (grant, Some(place)),
                    Some(None) => {
                        return Step::Stopped(Err(self.gave_up(Failure::Cancelled { attempts: done })))
                    }
                    None => (limiter.counted(Grant::Refused(limiter.interval_now())), None),
                }
            } else {
                let grant = match limiter.take(room) {
                    Grant::Pending(wait) => Box::pin(limiter.take_granted(wait, room)).await,
                    grant => grant,
                };
                (grant, None)
            };
            match grant {
                Grant::After(wait) if wait.is_zero() => {}
                Grant::After(wait) => {
                    if !Box::pin(self.sleep(wait)).await {
                        return Step::Stopped(Err(self.gave_up(Failure::Cancelled { attempts: done })));
                    }
                }
                Grant::Refused(retry_in) | Grant::Pending(retry_in) => {
                    let rejection = Rejection::RateLimited { retry_in };
                    return Step::Stopped(Err(self.rejected::<T, E>(rejection, done, None)));
                }
            }
            drop(place);
        }
        let admission = match admission {
            Some(admitted) if paced => match admitted.readmit() {
                Ok(admitted) => Some(admitted),
                Err(rejection) => {
                    drop(slot);
                    return Step::Stopped(Err(self.rejected::<T, E>(rejection, done, None)));
                }
            },
            other => other,
        };
        if self.admit_by.take().is_some() {
            // Its turn came: the total timeout counts from here.
            self.start_deadline();
        }

        inner.events.emit(EventKind::AttemptStarted { op: self.kind, attempt: n });
        let attempt_token = match inner.timeout.strategy() {
            Strategy::Cooperative => {
                Some(self.cancel.map_or_else(CancellationToken::new, CancellationToken::child_token))
            }
            Strategy::Aggressive => None,
        };
        let ctx = AttemptContext {
            attempt: n,
            kind: self.kind,
            key: self.key.cloned(),
            cancel: attempt_token.clone().or_else(|| self.cancel.cloned()),
        };
        let span = MaybeSpan::new(|| {
            tracing::debug_span!(
                parent: self.span.get().and_then(tracing::Span::id),
                "ballast.attempt",
                ballast.attempt = i64::from(n),
                error.type = tracing::field::Empty,
                ballast.next_delay_ms = tracing::field::Empty,
            )
        });
        let mark = self.mark();
        let result = AttemptDeadline::new(
            (self.op)(ctx),
            &inner.timeout,
            &self.deadline,
            self.cancel,
            attempt_token,
            span.get(),
            &mut self.timer,
        )
        .nested(mark)
        .await;
        drop(slot);

        let mut elsewhere = false;
        let (failure, retry_after) = match result {
            Attempt::Done(Ok(value)) | Attempt::Drained(Ok(value), _) => match self.judge.judge(&value) {
                Some(c) => {
                    self.throttled(c);
                    (LastFailure::Answered(value, c.class), c.retry_after)
                }
                None => {
                    if let Some(a) = admission {
                        a.record(false);
                    }
                    self.span.record("ballast.attempts", i64::from(n));
                    self.inner.events.emit(EventKind::Succeeded { op: self.kind, attempts: n });
                    return Step::Succeeded(value);
                }
            },
            Attempt::Done(Err(error)) => {
                let c = error.classify();
                self.throttled(c);
                elsewhere = c.elsewhere;
                (LastFailure::Error(error, c.class), c.retry_after)
            }
            Attempt::TimedOut(which) | Attempt::Drained(Err(_), Some(which)) => {
                (LastFailure::TimedOut(which), None)
            }
            Attempt::Cancelled | Attempt::Drained(Err(_), None) => {
                drop(admission);
                return Step::Stopped(Err(self.gave_up(Failure::Cancelled { attempts: n })));
            }
        };
        let class = failure.class();
        let timed_out = matches!(failure, LastFailure::TimedOut(_));
        // A failure outside the system says nothing of it: the admission
        // is let go unrecorded.
        if let (Some(a), Some(b)) = (admission.filter(|_| !elsewhere), self.inner.breaker.as_ref()) {
            a.record(b.config().is_failure(class));
        }
        span.record("error.type", if timed_out { "timeout" } else { class.as_str() });
        self.inner.events.emit(EventKind::AttemptFailed { op: self.kind, attempt: n, class, timed_out });

        let stop = if class == Class::Permanent {
            Some(StopReason::Permanent)
        } else if matches!(failure, LastFailure::TimedOut(TimeoutKind::Total)) {
            Some(StopReason::TotalTimeout)
        } else if let Some(once) = self.once {
            Some(once)
        } else if self.nested.is_some() {
            Some(StopReason::Nested)
        } else if n >= self.inner.retry.max_attempts() {
            Some(StopReason::Exhausted)
        } else {
            None
        };
        match stop {
            Some(stop) => Step::Stopped(self.ended(failure, n, stop)),
            None => Step::Failed { failure, retry_after, span },
        }
    }

    /// Retries after a failed first attempt, until success or a reason to stop.
    async fn retry_loop<T, E, Fut>(
        &mut self,
        mut failure: LastFailure<T, E>,
        mut retry_after: Option<Duration>,
        mut span: MaybeSpan,
    ) -> Result<T, Failure<E>>
    where
        F: FnMut(AttemptContext) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
        J: Judge<T>,
    {
        let inner = self.inner;
        let backoff = inner.retry.get_backoff();
        let mut delays = backoff.delays(inner.next_seed());
        let mut attempt = 1;
        loop {
            // An open breaker ends the call now, before it spends budget or waits.
            if let Some(rejection) = inner.breaker.as_ref().and_then(|b| b.refusal()) {
                return Err(self.rejected(rejection, attempt, Some(failure)));
            }
            if inner.budget.as_ref().is_some_and(|b| !b.try_withdraw()) {
                inner.events.emit(EventKind::BudgetExhausted);
                return self.ended(failure, attempt, StopReason::BudgetExhausted);
            }
            let mut delay = delays.next().unwrap_or(backoff.cap());
            if let Some(after) = retry_after {
                delay = delay.max(after);
            }
            let overruns = match self.deadline {
                Some(d) => deadline_after(Instant::now(), delay) >= d,
                None => retry_after.is_some_and(|after| after > inner.worst_case),
            };
            if overruns {
                return self.ended(failure, attempt, StopReason::DeadlineWouldOverrun);
            }
            span.record("ballast.next_delay_ms", i64::try_from(delay.as_millis()).unwrap_or(i64::MAX));
            inner.events.emit(EventKind::RetryScheduled { op: self.kind, attempt, delay });
            if !self.sleep(delay).await {
                return Err(self.gave_up(Failure::Cancelled { attempts: attempt }));
            }

            attempt += 1;
            match self.attempt(attempt).await {
                Step::Succeeded(value) => return Ok(value),
                Step::Stopped(Err(Failure::Rejected { rejection, attempts, last_error: None })) => {
                    let last_error = failure.into_error();
                    return Err(Failure::Rejected { rejection, attempts, last_error });
                }
                Step::Stopped(result) => return result,
                Step::Failed { failure: f, retry_after: r, span: s } => {
                    (failure, retry_after, span) = (f, r, s)
                }
            }
        }
    }

    /// Tells the rate limit of a throttling answer.
    fn throttled(&self, c: crate::Classification) {
        if let (true, Some(limiter)) = (c.throttled, &self.inner.rate_limit) {
            limiter.throttled(c.retry_after);
        }
    }

    /// The total deadline, from now.
    fn start_deadline(&mut self) {
        self.deadline = self.inner.timeout.total_deadline().map(|t| deadline_after(Instant::now(), t));
    }

    /// Waits `delay` on the call's timer; false if the caller cancelled first.
    async fn sleep(&mut self, delay: Duration) -> bool {
        let wake_at = deadline_after(Instant::now(), delay);
        let timer = match self.timer.as_mut() {
            Some(t) => {
                t.as_mut().reset(wake_at);
                t
            }
            None => self.timer.insert(Box::pin(tokio::time::sleep_until(wake_at))),
        };
        match self.cancel {
            None => {
                timer.await;
                true
            }
            Some(token) => tokio::select! {
                () = timer => true,
                () = token.cancelled() => false,
            },
        }
    }
}
