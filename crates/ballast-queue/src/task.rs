use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ballast::IdempotencyKey;
use serde::Serialize;

use crate::error::{Error, Result};

/// Attempts a task gets unless told otherwise (R-RES-RE-5: "after 10 failures").
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

/// The longest task kind, in bytes.
pub const MAX_KIND_LEN: usize = 128;

/// Checks a task kind: 1 to [`MAX_KIND_LEN`] characters from `A–Z a–z 0–9`
/// and `. _ - : /`. A kind names a handler, a metric label and a column of
/// every admin view, so it is a short identifier, never data.
///
/// ```
/// use ballast_queue::check_kind;
///
/// assert!(check_kind("ballast.http.delivery").is_ok());
/// assert!(check_kind("").is_err());
/// assert!(check_kind("send sms").is_err());
/// ```
pub fn check_kind(kind: &str) -> Result<()> {
    let reason = if kind.is_empty() {
        "it is empty"
    } else if kind.len() > MAX_KIND_LEN {
        "it is longer than 128 bytes"
    } else if !kind.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/".contains(&b)) {
        "it has characters other than A-Z a-z 0-9 . _ - : /"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKind { kind: kind.chars().take(MAX_KIND_LEN).collect(), reason })
}

/// A task to enqueue: its kind, JSON payload and options.
///
/// ```
/// use ballast::IdempotencyKey;
/// use ballast_queue::NewTask;
///
/// let task = NewTask::new("send-sms", &("+3100000000", "hello"))
///     .key(IdempotencyKey::v5("order-17", "send-sms"))
///     .max_attempts(5);
/// assert_eq!(task.kind(), "send-sms");
/// ```
#[derive(Debug)]
pub struct NewTask {
    pub(crate) kind: String,
    // Kept until enqueue so the builder chain stays infallible; the error
    // surfaces from `enqueue` with the task kind attached.
    pub(crate) payload: Result<String, serde_json::Error>,
    pub(crate) key: Option<IdempotencyKey>,
    pub(crate) run_at: Option<SystemTime>,
    pub(crate) max_attempts: u32,
}

impl NewTask {
    /// A task of `kind` whose handler will receive `payload`.
    pub fn new<P: Serialize + ?Sized>(kind: impl Into<String>, payload: &P) -> Self {
        Self {
            kind: kind.into(),
            payload: serde_json::to_string(payload),
            key: None,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Deduplicates by `(kind, key)`: enqueueing the same key again returns the
    /// existing task. The handler receives the key (R-RES-RE-1).
    pub fn key(mut self, key: IdempotencyKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Runs the task no earlier than `at`.
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs the task no earlier than `delay` from now.
    pub fn run_after(self, delay: Duration) -> Self {
        self.run_at(SystemTime::now() + delay)
    }

    /// Attempts before the task is marked failed and the alert fires (default 10).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The task kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub(crate) fn validate(self) -> Result<ValidTask> {
        check_kind(&self.kind)?;
        let max = i32::MAX as u32;
        if self.max_attempts == 0 || self.max_attempts > max {
            return Err(Error::InvalidMaxAttempts { got: self.max_attempts, max });
        }
        let payload = self.payload.map_err(|source| Error::Payload { kind: self.kind.clone(), source })?;
        Ok(ValidTask {
            kind: self.kind,
            payload,
            key: self.key.map(|k| k.as_str().to_owned()),
            run_at: self.run_at.map(micros),
            max_attempts: self.max_attempts as i32,
        })
    }
}

/// A task checked for enqueueing, in the types the stores bind.
#[derive(Debug)]
pub struct ValidTask {
    pub kind: String,
    pub payload: String,
    pub key: Option<String>,
    pub run_at: Option<i64>,
    pub max_attempts: i32,
}

/// What `enqueue` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnqueueOutcome {
    /// The task's id: the new one, or the existing task's with the same key.
    pub id: i64,
    /// `false` when a task with the same kind and key already existed.
    pub created: bool,
}

/// Where a task is in its life (see SCHEMA.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskState {
    /// Waiting for `run_at`, or due.
    Pending,
    /// Claimed by a worker holding a lease.
    Running,
    /// The handler succeeded. Final.
    Completed,
    /// Permanent error, attempts used up, panic or bad payload. Final until retried.
    Failed,
    /// Cancelled by an operator. Final.
    Cancelled,
}

impl TaskState {
    /// Every state, in life-cycle order.
    pub const ALL: [TaskState; 5] = [
        TaskState::Pending,
        TaskState::Running,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
    ];

    /// The name stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `state` column value this version does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task state {0:?}: expected pending, running, completed, failed or cancelled")]
pub struct UnknownState(pub String);

impl FromStr for TaskState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, UnknownState> {
        TaskState::ALL.into_iter().find(|state| state.as_str() == s).ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// One failed attempt, as kept in a task's bounded error history.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ErrorRecord {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// When it failed, in microseconds since the Unix epoch.
    pub at: i64,
    /// The error message.
    pub error: String,
}

/// A task as stored, for the admin API.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    /// Task id.
    pub id: i64,
    /// Task kind.
    pub kind: String,
    /// The JSON payload.
    pub payload: serde_json::Value,
    /// The idempotency key, if the task has one.
    pub key: Option<String>,
    /// Current state.
    pub state: TaskState,
    /// Attempts started so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// When the task is (or was) due.
    pub run_at: SystemTime,
    /// Worker holding the lease, while running.
    pub lease_owner: Option<String>,
    /// When the lease runs out, while running.
    pub lease_expires_at: Option<SystemTime>,
    /// The latest error message.
    pub last_error: Option<String>,
    /// The latest errors, oldest first (at most [`ERROR_HISTORY`](crate::ERROR_HISTORY)).
    pub errors: Vec<ErrorRecord>,
    /// When the task was enqueued.
    pub created_at: SystemTime,
    /// When the row last changed.
    pub updated_at: SystemTime,
    /// When the task reached a final state.
    pub finalized_at: Option<SystemTime>,
}

/// The number of past errors kept per task (older ones are dropped).
pub const ERROR_HISTORY: usize = 10;

pub(crate) fn micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn from_micros(us: i64) -> SystemTime {
    let abs = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        UNIX_EPOCH + abs
    } else {
        UNIX_EPOCH - abs
    }
}

pub(crate) fn duration_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_through_their_column_names() {
        for state in TaskState::ALL {
            assert_eq!(state.as_str().parse::<TaskState>(), Ok(state));
        }
        assert!("done".parse::<TaskState>().is_err());
    }

    #[test]
    fn micros_round_trip() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(from_micros(micros(t)), t);
        assert_eq!(from_micros(-5), UNIX_EPOCH - Duration::from_micros(5));
    }

    #[test]
    fn kinds_are_short_identifiers() {
        for good in ["a", "send-sms", "ballast.http.delivery", "billing:charge/v2", &"k".repeat(MAX_KIND_LEN)]
        {
            assert!(NewTask::new(good, &1).validate().is_ok(), "{good}");
        }
        for bad in ["", " ", "send sms", "kind\u{1b}[2J", "ключ", &"k".repeat(MAX_KIND_LEN + 1)] {
            let err = NewTask::new(bad, &1).validate().unwrap_err();
            assert!(matches!(err, Error::InvalidKind { .. }), "{bad:?}: {err}");
        }
    }

    #[test]
    fn invalid_options_are_errors_not_panics() {
        assert!(matches!(
            NewTask::new("k", &1).max_attempts(0).validate(),
            Err(Error::InvalidMaxAttempts { got: 0, .. })
        ));
        let bad = std::collections::HashMap::from([((1, 2), 3)]);
        assert!(matches!(NewTask::new("k", &bad).validate(), Err(Error::Payload { .. })));
    }
}
