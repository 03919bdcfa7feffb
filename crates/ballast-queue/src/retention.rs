//! Keeping the table small: final tasks are deleted once they are older than
//! their state's retention, in small batches on an interval, so no delete
//! holds its locks for long or competes with the workers for more than a
//! moment.
//!
//! A pruned task's idempotency key no longer deduplicates enqueueing: keep
//! completed tasks longer than the external systems keep their keys
//! (R-RES-RE-1). Failed tasks are kept longer still: a human has to look at
//! them (R-RES-RE-5). Key bindings ([`crate::bound_keys`]) go once their
//! key's life is over, in the same passes.
//!
//! ```no_run
//! # async fn run(queue: ballast_queue::Queue) {
//! use std::time::Duration;
//! use ballast_queue::Retention;
//! use tokio_util::sync::CancellationToken;
//!
//! let stop = CancellationToken::new();
//! let pruning = Retention::default().completed(Duration::from_secs(3 * 24 * 3600)).spawn(queue, stop.clone());
//! // … on shutdown:
//! stop.cancel();
//! pruning.await.ok();
//! # }
//! ```

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::PRUNED;
use crate::types::TaskState;
use crate::Queue;
use crate::{RETAIN_COMPLETED, RETAIN_FAILED};

/// What to delete, and how gently; see [`Retention::spawn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Retention {
    /// How long completed and cancelled tasks are kept.
    #[setters(generate)]
    completed: Duration,
    /// How long failed tasks are kept.
    #[setters(generate)]
    failed: Duration,
    every: Duration,
    batch: u32,
}

impl Default for Retention {
    /// [`RETAIN_COMPLETED`] and [`RETAIN_FAILED`], a pass every minute,
    /// 500 tasks per delete.
    fn default() -> Self {
        Self {
            completed: RETAIN_COMPLETED,
            failed: RETAIN_FAILED,
            every: Duration::from_secs(60),
            batch: 500,
        }
    }
}

impl Retention {
    /// Time between passes (at least 1 s).
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_secs(1));
        self
    }

    /// Tasks deleted per statement (at least 1).
    #[must_use]
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.max(1);
        self
    }

    /// Deletes what is past its retention now, a batch at a time, and
    /// returns how many tasks and expired key bindings went. Stops early, with what it deleted so far,
    /// when `stop` is cancelled.
    pub async fn prune(&self, queue: &Queue, stop: &CancellationToken) -> crate::Result<u64> {
        let mut total = 0;
        for (state, keep) in [
            (TaskState::Completed, self.completed),
            (TaskState::Cancelled, self.completed),
            (TaskState::Failed, self.failed),
        ] {
            loop {
                if stop.is_cancelled() {
                    return Ok(total);
                }
                let deleted = queue.prune_batch(state, keep, self.batch).await?;
                total += deleted;
                ::metrics::counter!(PRUNED, "state" => state.as_str()).increment(deleted);
                if deleted < u64::from(self.batch) {
                    break;
                }
                // Between batches, the workers' statements get the database.
                tokio::task::yield_now().await;
            }
        }
        loop {
            if stop.is_cancelled() {
                return Ok(total);
            }
            let deleted = queue.prune_bound_keys(self.batch).await?;
            total += deleted;
            ::metrics::counter!(PRUNED, "state" => "key_binding").increment(deleted);
            if deleted < u64::from(self.batch) {
                break;
            }
            tokio::task::yield_now().await;
        }
        Ok(total)
    }

    /// Prunes at once and then every [`every`](Retention::every) until
    /// `stop` is cancelled. A pass that fails is logged and tried again at
    /// the next one.
    pub fn spawn(self, queue: Queue, stop: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(self.every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while stop.run_until_cancelled(tick.tick()).await.is_some() {
                match self.prune(&queue, &stop).await {
                    Ok(0) => {}
                    Ok(deleted) => {
                        tracing::info!(deleted, "pruned tasks and key bindings past their retention")
                    }
                    Err(e) => tracing::warn!(error = %e, "pruning failed; trying again at the next pass"),
                }
            }
        })
    }
}
