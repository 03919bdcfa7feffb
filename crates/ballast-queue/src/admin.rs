//! Operating the queue: what is in it, and putting failed tasks back.

use std::time::Duration;

use crate::error::Result;
use crate::store::Store;
use crate::task::{TaskInfo, TaskState};
use crate::Queue;

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

/// Which tasks [`Queue::list`] returns: a page of at most `limit` tasks in id
/// order, starting after `after_id` (pass the last id of a page to get the next).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this state.
    pub state: Option<TaskState>,
    /// Only ids greater than this.
    pub after_id: i64,
    /// Page size.
    pub limit: u32,
}

impl Default for ListFilter {
    fn default() -> Self {
        Self { kind: None, state: None, after_id: 0, limit: 100 }
    }
}

impl ListFilter {
    /// Only tasks of `kind`.
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

    /// At most `limit` tasks.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

impl Queue {
    /// Counts per kind and state, and the age of the oldest due task per kind.
    pub async fn stats(&self) -> Result<Vec<KindStats>> {
        self.store.stats().await
    }

    /// One page of tasks matching `filter`.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>> {
        self.store.list(filter).await
    }

    /// One task, if it exists.
    pub async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        self.store.get(id).await
    }

    /// Puts a failed task back to pending, due now, with a fresh set of
    /// attempts. Returns `false` if the task is not in the `failed` state.
    pub async fn retry(&self, id: i64) -> Result<bool> {
        Ok(self.store.retry(Some(id), None).await? == 1)
    }

    /// [`retry`](Self::retry) for every failed task of `kind`; returns how many.
    pub async fn retry_failed(&self, kind: &str) -> Result<u64> {
        self.store.retry(None, Some(kind)).await
    }

    /// Makes a pending task due now, skipping the rest of its backoff.
    /// Returns `false` if the task is not pending.
    pub async fn run_now(&self, id: i64) -> Result<bool> {
        self.store.run_now(id).await
    }

    /// Cancels a pending or running task. A worker still running it finds its
    /// lease gone and changes nothing. Returns `false` if the task was already
    /// final.
    pub async fn cancel(&self, id: i64) -> Result<bool> {
        self.store.cancel(id).await
    }

    /// Deletes completed, failed and cancelled tasks finalized more than
    /// `older_than` ago; returns how many. Their idempotency keys become free
    /// again, so keep them longer than the external systems' key TTL (R-RES-RE-1).
    pub async fn prune(&self, older_than: Duration) -> Result<u64> {
        self.store.prune(older_than).await
    }
}
