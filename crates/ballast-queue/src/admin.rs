//! Operating the queue: what is in it, and putting failed tasks back.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::Store;
use crate::types::{KindStats, ListFilter, TaskInfo, TaskState};
use crate::Queue;

impl Queue {
    /// Counts per kind and state, and the age of the oldest due task per kind.
    pub async fn stats(&self) -> Result<Vec<KindStats>> {
        self.store.stats().await
    }

    /// How many unfinished (pending or running) tasks of `kind` (and of its
    /// members, `{kind}/…`: [`Handler::family`](crate::Handler::family)) there are
    /// for each value of their payload's top-level `field` (a task whose
    /// payload has no such string counts under `""`). `field` is a plain
    /// name: ASCII letters, digits and `_`. One grouped scan of the kind's
    /// tasks: for an operator's question, not for every call.
    ///
    /// ```no_run
    /// # async fn f(queue: ballast_queue::Queue) -> Result<(), ballast_queue::Error> {
    /// let waiting = queue.unfinished_by("ballast.http.delivery", "system").await?;
    /// println!("{} deliveries to pay", waiting.get("pay").copied().unwrap_or(0));
    /// # Ok(()) }
    /// ```
    pub async fn unfinished_by(&self, kind: &str, field: &str) -> Result<BTreeMap<String, u64>> {
        if field.is_empty() || !field.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(Error::InvalidArgument(format!(
                "unfinished_by: {field:?} is not a plain payload field name (letters, digits, _)"
            )));
        }
        self.store.unfinished_by(kind, field).await
    }

    /// One page of tasks matching `filter`.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>> {
        self.store.list(filter).await
    }

    /// One task, if it exists.
    pub async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        self.answered(self.store.get(id)).await
    }

    /// The task of `kind` enqueued with idempotency key `key`, if it exists
    /// (a key names one task of a kind).
    pub async fn get_by_key(&self, kind: &str, key: &str) -> Result<Option<TaskInfo>> {
        self.answered(self.store.get_by_key(kind, key)).await
    }

    /// Puts a failed task back to pending, due now, with a fresh set of
    /// attempts. Returns `false` if the task is not in the `failed` state.
    pub async fn retry(&self, id: i64) -> Result<bool> {
        Ok(self.store.retry(Some(id), None).await? == 1)
    }

    /// [`retry`](Self::retry) for every failed task of `kind` and of its
    /// members (`{kind}/…`); returns how many.
    pub async fn retry_failed(&self, kind: &str) -> Result<u64> {
        self.store.retry(None, Some(kind)).await
    }

    /// Makes a pending task due now, skipping the rest of its backoff.
    /// Returns `false` if the task is not pending, or waits held behind its
    /// sequence (it goes when the task before it is done).
    pub async fn run_now(&self, id: i64) -> Result<bool> {
        self.store.run_now(id).await
    }

    /// Cancels a pending or running task. A worker still running it finds its
    /// lease gone and changes nothing. Returns `false` if the task was already
    /// final. The task held behind it in its sequence goes next.
    pub async fn cancel(&self, id: i64) -> Result<bool> {
        let Some(sequence) = self.store.cancel(id).await? else { return Ok(false) };
        // Nobody may be listening: nothing to tell then.
        let _ = self.ended.send(id);
        self.release_next(sequence).await?;
        Ok(true)
    }

    /// Takes a failed task out of its sequence, so the tasks held behind it
    /// go on (the failed task stays failed; [`retry`](Self::retry) sends it
    /// again, outside the sequence). Returns `false` if the task is not a
    /// failed task of a sequence.
    pub async fn release_from_sequence(&self, id: i64) -> Result<bool> {
        let left = self.store.leave_sequence(id).await?;
        let released = left.is_some();
        self.release_next(left).await?;
        Ok(released)
    }

    /// Makes due the task held next in `sequence`, the one before it gone.
    async fn release_next(&self, sequence: Option<String>) -> Result<()> {
        if let Some(sequence) = sequence {
            self.store.release_held(Some(std::slice::from_ref(&sequence))).await?;
        }
        Ok(())
    }

    /// The task that holds `sequence` now — the first pending, running or
    /// failed one — if any: a write of the sequence goes behind it.
    pub async fn sequence_head(&self, sequence: &str) -> Result<Option<i64>> {
        self.answered(self.store.sequence_head(sequence)).await
    }

    /// Makes due every task held behind a sequence that nothing holds any
    /// more (a worker does it after each completion; this finds what a
    /// process stopped between the two left behind, and what a prune freed).
    /// Returns how many.
    pub async fn release_held(&self) -> Result<u64> {
        self.store.release_held(None).await
    }

    /// Deletes completed, failed and cancelled tasks finalized more than
    /// `older_than` ago; returns how many. Their idempotency keys become free
    /// again, so keep them longer than the external systems' key TTL (R-RES-RE-1).
    pub async fn prune(&self, older_than: Duration) -> Result<u64> {
        self.store.prune(None, older_than, None).await
    }

    /// Deletes at most `limit` tasks in `state` (a final one: completed,
    /// failed or cancelled) finalized more than `older_than` ago, oldest
    /// first; returns how many. Small batches keep each delete's locks short
    /// — what [`Retention`](crate::Retention) does on an interval.
    pub async fn prune_batch(&self, state: TaskState, older_than: Duration, limit: u32) -> Result<u64> {
        if !state.is_final() {
            return Err(Error::InvalidArgument(format!(
                "prune_batch: {} is not a final state",
                state.as_str()
            )));
        }
        self.store.prune(Some(state), older_than, Some(limit)).await
    }
}

impl Queue {
    /// Refreshes the `ballast_queue_tasks{kind,state}` and
    /// `ballast_queue_lag_seconds{kind}` gauges from [`Queue::stats`] and
    /// returns those stats. One `GROUP BY` over the table: call it before a
    /// scrape or on an interval, not per task. Attempt counters
    /// (`ballast_task_attempts_total`) are kept by the workers themselves.
    pub async fn record_metrics(&self) -> Result<Vec<KindStats>> {
        let stats = self.stats().await?;
        self.gauges.record(&stats);
        Ok(stats)
    }
}
