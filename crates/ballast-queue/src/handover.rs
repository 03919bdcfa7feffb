//! Hand-over from in-memory retry to the durable queue: a keyed write whose
//! in-memory attempts ran out on transient errors, or that was rejected
//! (breaker open, bulkhead full, budget empty), becomes a task carrying the
//! same idempotency key (R-RES-RE-4, R-RES-RE-1).

use std::fmt;
use std::future::Future;

use ballast::{AttemptContext, Classify, Failure, IdempotencyKey, Policy, Rejection};

use crate::error::Error;
use crate::task::NewTask;
use crate::Queue;

/// How a [`WriteOrDefer::write_or_defer`] call ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover<T> {
    /// The write succeeded in memory.
    Done(T),
    /// The write was handed to the durable queue. A second hand-over of
    /// the same user action (same kind and key) returns the same task
    /// instead of making another.
    Deferred {
        /// The id of the task that will finish it.
        task_id: i64,
        /// The in-memory attempts made before the hand-over.
        attempts: u32,
    },
}

/// Why [`WriteOrDefer::write_or_defer`] returned neither a value nor a task.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError<E> {
    /// The write failed in a way a later attempt cannot fix (a permanent
    /// error, R-RES-RE-X2, or cancellation): it is not deferred.
    #[error("{0}; not deferred: a later attempt cannot fix it")]
    Failed(Failure<E>),
    /// The write should have been deferred, but the task could not be stored.
    /// The write's outcome is unknown to the queue: retry the hand-over or
    /// report the failure.
    #[error("{failure}; deferring it to the queue failed too: {error}")]
    Enqueue {
        /// Why the in-memory path gave up.
        failure: Failure<E>,
        /// Why the task could not be stored.
        error: Error,
    },
}

/// Adds [`write_or_defer`](WriteOrDefer::write_or_defer) to [`ballast::Policy`].
pub trait WriteOrDefer {
    /// Runs `op` as a keyed write ([`Policy::write`]); if it gives up on
    /// transient errors or is rejected, enqueues `task` with the same `key` so
    /// a worker finishes it, and returns [`Handover::Deferred`].
    ///
    /// `task`'s key is set to `key`: the key is made once per user action,
    /// never per attempt (R-RES-RE-1). Unless `task` has its own `run_at`, a
    /// task deferred because the breaker is open is scheduled for when the
    /// breaker will probe again; otherwise it is due at once.
    ///
    /// ```no_run
    /// # async fn f(policy: ballast::Policy, queue: ballast_queue::Queue) {
    /// use ballast::IdempotencyKey;
    /// use ballast_queue::{Handover, NewTask, WriteOrDefer};
    ///
    /// let key = IdempotencyKey::v5("order-17", "register-payment");
    /// let task = NewTask::new("register-payment", &17);
    /// match policy.write_or_defer(&key, &queue, task, |ctx| async move {
    ///     Ok::<_, std::io::Error>(ctx.attempt())
    /// }).await {
    ///     Ok(Handover::Done(_)) => { /* paid */ }
    ///     Ok(Handover::Deferred { task_id, .. }) => { /* tell the user it is in progress: task {task_id} */ }
    ///     Err(e) => { /* declined: show the error */ let _ = e; }
    /// }
    /// # }
    /// ```
    fn write_or_defer<T, E, F, Fut>(
        &self,
        key: &IdempotencyKey,
        queue: &Queue,
        task: NewTask,
        op: F,
    ) -> impl Future<Output = Result<Handover<T>, HandoverError<E>>> + Send
    where
        T: Send,
        E: Classify + fmt::Display + Send,
        F: FnMut(AttemptContext) -> Fut + Send,
        Fut: Future<Output = Result<T, E>> + Send;
}

impl WriteOrDefer for Policy {
    async fn write_or_defer<T, E, F, Fut>(
        &self,
        key: &IdempotencyKey,
        queue: &Queue,
        task: NewTask,
        op: F,
    ) -> Result<Handover<T>, HandoverError<E>>
    where
        T: Send,
        E: Classify + fmt::Display + Send,
        F: FnMut(AttemptContext) -> Fut + Send,
        Fut: Future<Output = Result<T, E>> + Send,
    {
        hand_over(queue, key, task, self.write(key, op).await).await
    }
}

/// Hands the outcome of a keyed write over to the durable queue: a success is
/// [`Handover::Done`]; a failure that a later attempt can fix (transient, or
/// a rejection) becomes `task`, carrying `key`, and [`Handover::Deferred`];
/// any other failure is returned. The common step of every `write_or_defer`,
/// for integrations that run the write themselves (an HTTP system, say).
///
/// Unless `task` has its own `run_at`, a task deferred because the breaker is
/// open is scheduled for the breaker's next probe; otherwise it is due at once.
pub async fn hand_over<T, E: fmt::Display>(
    queue: &Queue,
    key: &IdempotencyKey,
    task: NewTask,
    outcome: Result<T, Failure<E>>,
) -> Result<Handover<T>, HandoverError<E>> {
    let failure = match outcome {
        Ok(value) => return Ok(Handover::Done(value)),
        Err(failure) if failure.is_deferrable() => failure,
        Err(failure) => return Err(HandoverError::Failed(failure)),
    };
    let mut task = task.key(key.clone());
    if task.run_at.is_none() {
        // Due when the refusal says the system lets a call through again:
        // the breaker's next probe, the rate limit's next permit.
        if let Some(retry_in) = failure.rejection().as_ref().and_then(Rejection::background_retry_in) {
            task = task.run_after(retry_in);
        }
    }
    let kind = task.kind().to_owned();
    match queue.enqueue(task).await {
        Ok(outcome) => {
            tracing::info!(
                task_id = outcome.id,
                kind = %kind,
                new_task = outcome.created,
                key = %key,
                attempts = failure.attempts(),
                cause = %failure,
                "write deferred to the durable queue with the same idempotency key (R-RES-RE-4)"
            );
            Ok(Handover::Deferred { task_id: outcome.id, attempts: failure.attempts() })
        }
        Err(error) => Err(HandoverError::Enqueue { failure, error }),
    }
}
