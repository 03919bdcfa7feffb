//! Telling a human about a task that failed for good (R-RES-RE-5: "after 10
//! failures the task is marked failed and a human is alerted"): the
//! [`Alert`] hook the worker calls once per failed task, and the default
//! that logs it.

use ballast::Rule;

/// Why a task ended in the `failed` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// Every attempt failed with a transient error (R-RES-RE-5).
    Exhausted,
    /// The handler returned a permanent error (R-RES-RE-X2: never retried).
    Permanent,
    /// The handler panicked.
    Panicked,
    /// The payload did not deserialize into the handler's type.
    BadPayload,
    /// The lease of the last allowed attempt expired: its worker died or hung.
    LeaseExpired,
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
}

/// Told about every task that reaches the `failed` state
/// (R-RES-RE-5: "a human is alerted"). Wire it to paging or a ticket system.
pub trait Alert: Send + Sync + 'static {
    /// Called once per failed task, after the failure is stored.
    fn task_failed(&self, task: &FailedTask);
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
            "task failed for good; a human must look at it ({}): retry it with Queue::retry once the cause is fixed",
            Rule::Re5.id(),
        );
    }
}
