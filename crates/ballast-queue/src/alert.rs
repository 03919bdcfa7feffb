//! Telling a human about a task that failed for good (R-RES-RE-5: "after 10
//! failures the task is marked failed and a human is alerted"): the
//! [`Alert`] hook the worker calls once per failed task, and the default
//! that logs it.
//!
//! An alert that must reach someone is itself a side effect on an external
//! system, so it gets the queue's guarantees: [`Alert::enqueue`] returns tasks
//! that are stored in the same transaction that marks the task failed, each
//! keyed by [`FailedTask::failure_key`]. A crash cannot lose the alert, and a
//! redelivery carries the same key.
//!
//! **The durable alert task is the exactly-once path**: it exists if and only
//! if the failure was stored by its attempt's own fenced write — never for a
//! stale attempt whose outcome was refused — and it is delivered by a
//! worker like any task. [`Alert::task_failed`], the in-process hook, is
//! best effort: it runs after the failure is known to be stored, so a
//! worker killed between the commit and the hook, or one whose answer from
//! the database was lost, may skip it. Page humans from the task, log from
//! the hook. A worker is refused at build when its alert enqueues tasks of
//! a kind it has no handler for.

use std::time::SystemTime;

use ballast::{IdempotencyKey, Rule};
use uuid::Uuid;

use crate::task::NewTask;

/// Why a task ended in the `failed` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// Every attempt failed with a transient error (R-RES-RE-5).
    Exhausted,
    /// The handler returned a permanent error (R-RES-RE-X2: never retried).
    Permanent,
    /// The handler panicked on the last attempt allowed (a panic is an
    /// unknown outcome: earlier ones are tried again like transient failures).
    Panicked,
    /// The payload did not deserialize into the handler's type.
    BadPayload,
    /// The lease of the last allowed attempt expired: its worker died or hung.
    LeaseExpired,
}

impl FailReason {
    /// The reason as alerts and logs spell it: `exhausted`, `permanent`,
    /// `panicked`, `bad_payload` or `lease_expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Exhausted => "exhausted",
            FailReason::Permanent => "permanent",
            FailReason::Panicked => "panicked",
            FailReason::BadPayload => "bad_payload",
            FailReason::LeaseExpired => "lease_expired",
        }
    }
}

/// A task that failed for good: a human must look at it.
#[derive(Debug, Clone)]
pub struct FailedTask {
    /// Task id.
    pub id: i64,
    /// Task kind.
    pub kind: String,
    /// Idempotency key, if any.
    pub key: Option<String>,
    /// The attempt that failed.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Why it failed.
    pub reason: FailReason,
    /// The last error message.
    pub error: String,
    /// When the failure was recorded.
    pub failed_at: SystemTime,
    /// Identifies this failure: the lease of the attempt that failed, so a
    /// task an operator retried that fails again is a new failure.
    pub failure_id: Uuid,
    /// The sequence the task belongs to, if any: a failed task holds its
    /// sequence — the writes behind it wait — until an operator retries it
    /// or releases it from the sequence (`ballast queue release ID`,
    /// [`Queue::release_from_sequence`](crate::Queue::release_from_sequence)).
    pub sequence: Option<String>,
}

impl FailedTask {
    /// A failure of a made-up kind, to ask an [`Alert`] which kinds of task
    /// it enqueues.
    pub(crate) fn probe() -> Self {
        FailedTask {
            id: 0,
            kind: "ballast.probe".to_owned(),
            key: None,
            attempt: 1,
            max_attempts: 1,
            reason: FailReason::Exhausted,
            error: String::new(),
            failed_at: SystemTime::UNIX_EPOCH,
            failure_id: Uuid::nil(),
            sequence: None,
        }
    }

    /// The idempotency key of this failure's alert to `purpose` (a sink's
    /// name): derived from the task id, the attempt and that attempt's lease,
    /// so every redelivery of one alert carries the same key and a later
    /// failure of the same task gets a new one.
    pub fn failure_key(&self, purpose: &str) -> IdempotencyKey {
        let failure = format!("task {} attempt {} failure {}", self.id, self.attempt, self.failure_id);
        IdempotencyKey::v5(failure, purpose)
    }
}

/// Told about every task that reaches the `failed` state
/// (R-RES-RE-5: "a human is alerted"). Wire it to paging or a ticket system.
pub trait Alert: Send + Sync + 'static {
    /// Called once per failed task, after the failure is stored — at most
    /// once: best effort, see the module docs.
    fn task_failed(&self, task: &FailedTask);

    /// Tasks to enqueue in the same transaction that marks `task` failed
    /// (none by default): the durable half of an alert, delivered by a
    /// worker like any task. Key each with [`FailedTask::failure_key`]; a
    /// task whose kind and key are already queued is not added twice.
    ///
    /// Return nothing for a failed task of the alerts' own kind: an alert
    /// about an undeliverable alert would loop.
    fn enqueue(&self, task: &FailedTask) -> Vec<NewTask> {
        let _ = task;
        Vec::new()
    }
}

/// The default alert: an error-level `tracing` event naming R-RES-RE-5.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogAlert;

impl Alert for LogAlert {
    fn task_failed(&self, task: &FailedTask) {
        tracing::error!(
            rule = Rule::Re5.id(),
            task_id = task.id,
            kind = %task.kind,
            key = task.key.as_deref().unwrap_or(""),
            attempt = task.attempt,
            max_attempts = task.max_attempts,
            reason = ?task.reason,
            error = %task.error,
            sequence = task.sequence.as_deref().unwrap_or(""),
            "task failed for good; a human must look at it ({}): retry it with Queue::retry once the cause is fixed{}",
            Rule::Re5.id(),
            if task.sequence.is_some() {
                "; it holds its sequence (the writes behind it wait) until retried or released with Queue::release_from_sequence"
            } else {
                ""
            },
        );
    }
}
