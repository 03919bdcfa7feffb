//! The policy of one external system: one composition, fixed order,
//! retry → circuit breaker → bulkhead and rate limit → timeout (R-RES-RE-2,
//! R-RES-CB-1).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::breaker::CircuitBreaker;
use crate::budget::RetryBudget;
use crate::call;
use crate::policy_builder::PolicyBuilder;
use crate::policy_state::PolicyState;
use crate::rate_limit::RateLimiter;
use crate::retry::Retry;
use crate::rules::Violation;
use crate::timeline::Timeline;
use crate::timeout::Timeout;
use crate::{AttemptContext, Classify, Failure, IdempotencyKey, Judge, NoJudge, Operation, StopReason};

/// The in-memory window over which the guide sends work to the task queue (R-RES-RE-4).
pub const WINDOW_ERROR: Duration = Duration::from_secs(30);
/// The in-memory window over which the guide advises the task queue (R-RES-RE-4).
pub const WINDOW_WARNING: Duration = Duration::from_secs(5);

/// The resilience policy of one external system.
///
/// Operations declare whether they may be retried, and the policy obeys
/// (R-RES-RE-1): [`read`](Policy::read) and [`write`](Policy::write) (with an
/// idempotency key) are retried on transient errors; [`write_once`](Policy::write_once)
/// makes exactly one attempt (R-RES-RE-X1). Every attempt passes, in this fixed
/// order, through the circuit breaker, the bulkhead and the rate limit, and
/// the timeout.
///
/// Cloning is cheap and clones share state (breaker, bulkhead, budget): make
/// one policy per external system and share it.
///
/// Call two systems one after the other, not one inside the other: a
/// retrying call made inside another policy's attempt makes exactly one
/// attempt and stops with [`StopReason::Nested`](crate::StopReason::Nested),
/// because retrying there would put retry inside the outer breaker
/// (R-RES-CB-1) or inside the outer retry (R-RES-RE-X4).
///
/// ```
/// use std::time::Duration;
/// use ballast::{Backoff, Breaker, Bulkhead, IdempotencyKey, Policy, Retry, Timeout};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::builder("sber")
///     .retry(Retry::attempts(3).backoff(Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::from_secs(2))))
///     .breaker(Breaker::count(0.5, 50).half_open_after(Duration::from_secs(30)))
///     .bulkhead(Bulkhead::new(8).queue(16)) // 16 more may wait; without .queue(n) the 9th concurrent call is refused
///     .timeout(Timeout::aggressive(Duration::from_secs(5)))
///     .build()?;
///
/// let order = policy.read(|_ctx| async { Ok::<_, std::io::Error>("order 42") }).await?;
/// let key = IdempotencyKey::v5(42, "register-payment");
/// let paid = policy
///     .write(&key, |ctx| async move { Ok::<_, std::io::Error>(format!("paid with {}", ctx.key().unwrap())) })
///     .await?;
/// let _ = policy.write_once(|_ctx| async { Ok::<_, std::io::Error>(()) }).await?;
/// # let _ = (order, paid); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Policy {
    pub(crate) shared: Arc<PolicyState>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("system", &self.name())
            .field("retry", &self.shared.retry)
            .field("breaker", &self.shared.breaker.as_ref().map(CircuitBreaker::state))
            .field("timeout", &self.shared.timeout)
            .finish()
    }
}

impl Policy {
    /// Starts a policy for the external system `system` (used in events,
    /// spans and metrics).
    pub fn builder(system: impl Into<String>) -> PolicyBuilder {
        PolicyBuilder::new(system.into())
    }

    /// The external system's name.
    pub fn name(&self) -> &str {
        self.shared.events.system()
    }

    /// The worst-case in-memory window (R-RES-RE-4).
    pub fn worst_case(&self) -> Duration {
        self.shared.worst_case
    }

    /// The worst case of a call, attempt by attempt; it ends at [`worst_case`](Self::worst_case).
    pub fn timeline(&self) -> Timeline {
        let wait = self.shared.rate_limit.as_ref().map_or(Duration::ZERO, |l| l.limit().get_wait());
        Timeline::new(&self.shared.retry, &self.shared.timeout, wait)
    }

    /// Warnings found at build time (e.g. a window over 5 s, R-RES-RE-4).
    pub fn warnings(&self) -> &[Violation] {
        &self.shared.warnings
    }

    /// The retry settings.
    pub fn retry(&self) -> &Retry {
        &self.shared.retry
    }

    /// The timeout settings.
    pub fn timeout(&self) -> &Timeout {
        &self.shared.timeout
    }

    /// The circuit breaker, for its state, manual control and snapshots.
    pub fn breaker(&self) -> Option<&CircuitBreaker> {
        self.shared.breaker.as_ref()
    }

    /// Attempts in flight in the bulkhead now (`None` without a bulkhead):
    /// a sum over per-thread counters read one after another, so a view
    /// rather than a snapshot while calls run.
    pub fn bulkhead_in_flight(&self) -> Option<usize> {
        self.shared.bulkhead.as_ref().map(|b| b.in_flight())
    }

    /// Holds a bulkhead slot for work an attempt leaves running after it
    /// ends — a streamed answer's body, read after the call returned —
    /// until the returned guard is dropped (`None` without a bulkhead).
    /// Call it inside the attempt: the slot is taken whether or not one is
    /// free, and the attempt's own, given back as it ends, makes up for it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use ballast::{Bulkhead, Policy};
    ///
    /// let policy = Policy::builder("reports").bulkhead(Bulkhead::new(1)).build().unwrap();
    /// let held = policy.read(|_| async { Ok::<_, std::io::Error>(policy.hold_bulkhead_slot()) }).await.unwrap();
    /// assert_eq!(policy.bulkhead_in_flight(), Some(1)); // the attempt ended; its stream goes on
    /// drop(held);
    /// assert_eq!(policy.bulkhead_in_flight(), Some(0));
    /// # }
    /// ```
    pub fn hold_bulkhead_slot(&self) -> Option<crate::HeldSlot> {
        self.shared.bulkhead.as_ref().map(crate::bulkhead::HeldSlot::take)
    }

    /// The rate limiter (`None` without a rate limit): its rate and
    /// counts, and what an integration tells it of the system's limits.
    pub fn rate_limiter(&self) -> Option<&RateLimiter> {
        self.shared.rate_limit.as_ref()
    }

    /// The bulkhead's limit on attempts in flight (`None` without a bulkhead).
    pub fn bulkhead_limit(&self) -> Option<usize> {
        self.shared.bulkhead.as_ref().map(|b| b.limit())
    }

    /// How much of the retry budget the current window has spent (`None`
    /// without a budget): for dashboards; a call never needs it. Calls are
    /// counted per thread and summed here one counter after another, so a
    /// call made during the read may be missed; a retry's own decision never
    /// misses one.
    pub fn budget_level(&self) -> Option<crate::BudgetLevel> {
        self.shared.budget.as_ref().map(RetryBudget::level)
    }

    /// One call under this policy, as `operation` declares it: a read or
    /// a keyed write retried on transient failures, a write without a key
    /// made once (R-RES-RE-1, R-RES-RE-X1). Say what else the call needs
    /// ([`judged`](PolicyCall::judged), [`once`](PolicyCall::once),
    /// [`cancel_on`](PolicyCall::cancel_on)), then [`run`](PolicyCall::run)
    /// it; [`read`](Self::read), [`write`](Self::write) and
    /// [`write_once`](Self::write_once) are this with nothing else said.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// use ballast::{Classification, IdempotencyKey, Operation, Policy, Retry, StopReason};
    /// use tokio_util::sync::CancellationToken;
    ///
    /// let policy = Policy::builder("crm").retry(Retry::attempts(3)).build().unwrap();
    /// // An answer can be a failure all the same: three 503s, the last one is the answer.
    /// let busy = |status: &u16| (*status == 503).then(Classification::transient);
    /// let answer = policy.call(Operation::Read).judged(busy).run(|_| async { Ok::<u16, std::io::Error>(503) }).await;
    /// assert_eq!(answer.unwrap(), 503);
    ///
    /// // A keyed write to a system that does not deduplicate by key: made once, and the failure says why.
    /// let key = IdempotencyKey::v5("sms-7", "sms");
    /// let stop = CancellationToken::new();
    /// let failed = policy
    ///     .call(Operation::KeyedWrite(&key))
    ///     .once(StopReason::NotDeduplicated)
    ///     .cancel_on(&stop)
    ///     .run(|_| async { Err::<u16, _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)) })
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!((failed.attempts(), failed.stop_reason()), (1, StopReason::NotDeduplicated));
    /// # }
    /// ```
    pub fn call<'a>(&'a self, operation: Operation<'a>) -> PolicyCall<'a> {
        PolicyCall { policy: self, operation, once: None, cancel: None, judge: NoJudge }
    }

    /// Runs a read (GET-equivalent), retried on transient errors (R-RES-RE-1a).
    pub fn read<'a, T, E, F, Fut>(&'a self, op: F) -> impl Future<Output = Result<T, Failure<E>>> + 'a
    where
        F: FnMut(AttemptContext) -> Fut + 'a,
        Fut: Future<Output = Result<T, E>> + 'a,
        E: Classify + 'a,
        T: 'a,
    {
        self.call(Operation::Read).run(op)
    }

    /// Runs a write that carries `key`, which the external system
    /// deduplicates by: retried on transient errors, every attempt seeing the
    /// same key through [`AttemptContext::key`] (R-RES-RE-1b).
    pub fn write<'a, T, E, F, Fut>(
        &'a self,
        key: &'a IdempotencyKey,
        op: F,
    ) -> impl Future<Output = Result<T, Failure<E>>> + 'a
    where
        F: FnMut(AttemptContext) -> Fut + 'a,
        Fut: Future<Output = Result<T, E>> + 'a,
        E: Classify + 'a,
        T: 'a,
    {
        self.call(Operation::KeyedWrite(key)).run(op)
    }

    /// Runs a write without a key: exactly one attempt, never retried
    /// (R-RES-RE-X1), still through breaker, bulkhead and timeout.
    pub fn write_once<'a, T, E, F, Fut>(&'a self, op: F) -> impl Future<Output = Result<T, Failure<E>>> + 'a
    where
        F: FnMut(AttemptContext) -> Fut + 'a,
        Fut: Future<Output = Result<T, E>> + 'a,
        E: Classify + 'a,
        T: 'a,
    {
        self.call(Operation::WriteOnce).run(op)
    }
}

/// One call under a [`Policy`], being described; made by [`Policy::call`],
/// started by [`run`](Self::run).
#[derive(Debug, Clone, Copy)]
#[must_use = "a call does nothing until it is run"]
pub struct PolicyCall<'a, J = NoJudge> {
    policy: &'a Policy,
    operation: Operation<'a>,
    once: Option<StopReason>,
    cancel: Option<&'a CancellationToken>,
    judge: J,
}

impl<'a, J> PolicyCall<'a, J> {
    /// With `judge` saying which of the call's answers are failures all the
    /// same — an HTTP 503 is an answer, and a transient failure. Such an
    /// answer counts as a failed attempt (for the breaker and for retries,
    /// as an error of its class would), and a call that ends on one
    /// returns it as `Ok`: the answer stays an answer, for the caller to
    /// pass on (as tower's `retry::Policy` judges a `&Result<Res, E>`, and
    /// linkerd classifies a response beside it). `Failure` is left for
    /// "there was no answer to give".
    pub fn judged<K>(self, judge: K) -> PolicyCall<'a, K> {
        let PolicyCall { policy, operation, once, cancel, .. } = self;
        PolicyCall { policy, operation, once, cancel, judge }
    }

    /// Made once, as its caller decided, for `why`: one attempt, through
    /// breaker, bulkhead and timeout as always, its events those of the
    /// operation's kind (a keyed write still carries its key), and a
    /// failure that says `why` — say [`StopReason::NotDeduplicated`] for a
    /// keyed write to a system that does not deduplicate by key
    /// (R-RES-RE-1).
    pub fn once(mut self, why: StopReason) -> Self {
        self.once = Some(why);
        self
    }

    /// Stopped when `token` is cancelled: an attempt is dropped (or,
    /// cooperative, signalled) and a backoff wait ends at once, with
    /// [`Failure::Cancelled`].
    pub fn cancel_on(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Runs the call: `op` makes one attempt from its [`AttemptContext`].
    pub fn run<T, E, F, Fut>(self, op: F) -> impl Future<Output = Result<T, Failure<E>>> + 'a
    where
        F: FnMut(AttemptContext) -> Fut + 'a,
        Fut: Future<Output = Result<T, E>> + 'a,
        E: Classify + 'a,
        T: 'a,
        J: Judge<T> + 'a,
    {
        call::run(&self.policy.shared, self.operation, self.once, self.cancel, self.judge, op)
    }
}
