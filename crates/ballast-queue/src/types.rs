//! The queue's shared vocabulary, in one place that imports nothing else of
//! the crate: task states, what the admin API returns, and the
//! time conversions every store uses (River's `rivertype` plays this part).

use std::fmt;
use std::str::FromStr;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The table every task lives in (see [`schema`](crate::schema)).
pub const TABLE: &str = "ballast_tasks";

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

    /// Whether no worker will run it again unless an operator retries it:
    /// completed, failed or cancelled.
    pub fn is_final(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Cancelled)
    }

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
    /// What the successful attempt reported with
    /// [`TaskContext::set_result`](crate::TaskContext::set_result), if anything.
    pub result: Option<serde_json::Value>,
    /// The sequence the task belongs to ([`NewTask::sequence`](crate::NewTask::sequence)).
    pub sequence: Option<String>,
}

impl TaskInfo {
    /// Whether the task waits behind an unfinished one of its sequence:
    /// it is not due until that one completes, is cancelled or released.
    pub fn is_held(&self) -> bool {
        self.state == TaskState::Pending && micros(self.run_at) >= HELD
    }
}

/// When a task held behind its sequence is due (9999-01-01, in µs since
/// the Unix epoch): a time no claim reaches, so claims never walk it.
pub(crate) const HELD: i64 = 253_370_764_800_000_000;

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

/// Task counts of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindStats {
    /// The task kind.
    pub kind: String,
    /// Tasks waiting (due or scheduled).
    pub pending: u64,
    /// Tasks held by a worker.
    pub running: u64,
    /// Tasks done.
    pub completed: u64,
    /// Tasks failed for good.
    pub failed: u64,
    /// Tasks cancelled.
    pub cancelled: u64,
    /// How long the oldest due pending task has been waiting: the queue's lag.
    pub oldest_due_age: Option<Duration>,
}

impl KindStats {
    pub(crate) fn new(kind: String) -> Self {
        Self { kind, ..Self::default() }
    }

    pub(crate) fn add(&mut self, state: TaskState, n: i64) {
        let n = u64::try_from(n).unwrap_or(0);
        match state {
            TaskState::Pending => self.pending += n,
            TaskState::Running => self.running += n,
            TaskState::Completed => self.completed += n,
            TaskState::Failed => self.failed += n,
            TaskState::Cancelled => self.cancelled += n,
        }
    }

    /// Adds `other`'s counts to these, keeping the longer lag.
    pub(crate) fn absorb(&mut self, other: &KindStats) {
        for state in TaskState::ALL {
            self.add(state, i64::try_from(other.count(state)).unwrap_or(i64::MAX));
        }
        self.oldest_due_age = self.oldest_due_age.max(other.oldest_due_age);
    }

    /// Tasks of this kind in `state`.
    pub fn count(&self, state: TaskState) -> u64 {
        match state {
            TaskState::Pending => self.pending,
            TaskState::Running => self.running,
            TaskState::Completed => self.completed,
            TaskState::Failed => self.failed,
            TaskState::Cancelled => self.cancelled,
        }
    }
}

/// Which tasks [`Queue::list`](crate::Queue::list) returns: a page of at most
/// `limit` tasks in id order, starting after `after_id` (pass the last id of
/// a page to get the next) — or, [`newest_first`](ListFilter::newest_first),
/// in descending order before `before_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this kind and its members ([`ListFilter::kind`]).
    pub kind: Option<String>,
    /// Only this state.
    pub state: Option<TaskState>,
    /// Only ids greater than this.
    pub after_id: i64,
    /// Only ids less than this.
    pub before_id: Option<i64>,
    /// Newest first (descending ids) instead of oldest first.
    pub newest_first: bool,
    /// Page size.
    pub limit: u32,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self { kind: None, state: None, after_id: 0, before_id: None, newest_first: false, limit: 100 }
    }
}

impl ListFilter {
    /// Only tasks of `kind`, and of its members (`{kind}/…`: a family's
    /// name lists every member's tasks).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only tasks in `state`.
    pub fn state(mut self, state: TaskState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only tasks after `id`.
    pub fn after(mut self, id: i64) -> Self {
        self.after_id = id;
        self
    }

    /// Newest first, only tasks before `id` if given: pass the last id of a
    /// page to get the next, older one.
    pub fn newest_first(mut self, before: Option<i64>) -> Self {
        self.newest_first = true;
        self.before_id = before;
        self
    }

    /// At most `limit` tasks.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
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
}
