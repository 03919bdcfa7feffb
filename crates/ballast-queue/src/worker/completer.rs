//! The completer: keeps the outcomes of finished attempts until its next
//! round trip ([`Completer::flush`]) writes them as one batch, with the
//! producer's next claim; then ([`Completer::answered`]) counts, logs and
//! alerts what the database took, and what it refused because the lease
//! had been lost — or keeps the batch for the next round trip.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::alert::{Alert, FailedTask};
use crate::error::Result;
use crate::metrics::AttemptCounters;
use crate::outcome::Outcome;
use crate::store::any::AnyStore;
use crate::store::{ClaimRequest, ClaimedTask, Exchange, Lease, Store};

use super::RunSummary;

/// An outcome with what to tell once it is written.
#[derive(Debug)]
pub(super) struct Settling {
    pub outcome: Outcome,
    /// When the worker looks for the task again itself, sooner than its
    /// poll: a task it postponed for a moment (the breaker's probe), not
    /// one it handed back for another worker to take.
    pub due_in: Option<Duration>,
    /// The attempt counters of the task's kind.
    pub counters: Arc<AttemptCounters>,
    pub report: Report,
}

/// What is logged, counted and alerted once an outcome is written.
#[derive(Debug)]
pub(super) enum Report {
    Completed,
    Rescheduled {
        kind: String,
        attempt: u32,
        delay: Duration,
    },
    /// Rescheduled unsent, for any worker to take ([`TaskContext::hand_back`](crate::TaskContext::hand_back)).
    HandedBack {
        kind: String,
        attempt: u32,
        delay: Duration,
    },
    Failed(Box<FailedTask>),
    Released,
}

/// Outcomes on their way to the database, in the order they came.
#[derive(Debug, Default)]
pub(super) struct Batch {
    outcomes: Vec<Outcome>,
    reports: Vec<(Arc<AttemptCounters>, Report)>,
}

impl Batch {
    /// The outcomes, as the store writes them.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }
}

/// A round trip's batch and what the database answered.
pub(super) struct Flushed {
    batch: Batch,
    result: Result<Exchange>,
}

/// See the module docs.
pub(super) struct Completer {
    pending: Batch,
    alert: Arc<dyn Alert>,
    summary: RunSummary,
    /// Told the id of each task whose end was stored ([`Queue::ended`](crate::Queue::ended)).
    ended: tokio::sync::broadcast::Sender<i64>,
    /// Tasks postponed unsent, said once a minute per kind.
    postponed: super::postponed::Postponed,
}

impl Completer {
    pub fn new(alert: Arc<dyn Alert>, ended: tokio::sync::broadcast::Sender<i64>) -> Self {
        Self {
            pending: Batch::default(),
            alert,
            summary: RunSummary::default(),
            ended,
            postponed: super::postponed::Postponed::new(),
        }
    }

    pub fn push(&mut self, settling: Settling) {
        self.pending.outcomes.push(settling.outcome);
        self.pending.reports.push((settling.counters, settling.report));
    }

    /// Outcomes waiting for a round trip.
    pub fn len(&self) -> usize {
        self.pending.outcomes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.outcomes.is_empty()
    }

    /// One round trip: every outcome waiting, written with `claim` in one
    /// exchange with the database. Give its answer to
    /// [`answered`](Self::answered); the future may run beside the loop.
    pub fn flush(
        &mut self,
        store: AnyStore,
        claim: ClaimRequest,
    ) -> impl Future<Output = Flushed> + Send + 'static {
        let batch = std::mem::take(&mut self.pending);
        async move {
            let result = store.settle_and_claim(batch.outcomes(), &claim).await;
            Flushed { batch, result }
        }
    }

    /// A round trip's answer: the tasks it claimed and whether its
    /// completions released tasks held behind them, its outcomes counted,
    /// logged and alerted; on a database error the error, its outcomes kept
    /// to go first in the next round trip.
    pub fn answered(&mut self, flushed: Flushed) -> Result<(Vec<ClaimedTask>, bool)> {
        match flushed.result {
            Ok(exchange) => {
                self.settled(flushed.batch, &exchange.refused);
                Ok((exchange.claimed, exchange.released > 0))
            }
            Err(e) => {
                self.put_back(flushed.batch);
                Err(e)
            }
        }
    }

    /// A batch whose round trip failed: it goes first in the next one.
    fn put_back(&mut self, mut batch: Batch) {
        batch.outcomes.append(&mut self.pending.outcomes);
        batch.reports.append(&mut self.pending.reports);
        self.pending = batch;
    }

    /// A batch the database took, but for the outcomes in `refused`.
    fn settled(&mut self, batch: Batch, refused: &[Lease]) {
        for (outcome, (counters, report)) in batch.outcomes.iter().zip(batch.reports) {
            let lease = outcome.lease();
            if refused.contains(&lease) {
                self.summary.lost += 1;
                counters.lost.increment(1);
                tracing::warn!(
                    task_id = lease.id,
                    "outcome refused: the lease was lost (expired and re-claimed, or cancelled); the newer attempt's outcome stands"
                );
                continue;
            }
            match report {
                Report::Completed => {
                    self.summary.completed += 1;
                    counters.completed.increment(1);
                    // Nobody may be listening: nothing to tell then.
                    let _ = self.ended.send(lease.id);
                }
                Report::Rescheduled { kind, attempt, delay }
                | Report::HandedBack { kind, attempt, delay } => {
                    self.summary.rescheduled += 1;
                    let Outcome::Rescheduled { error, counted, .. } = outcome else { continue };
                    if *counted {
                        counters.retried.increment(1);
                        tracing::info!(task_id = lease.id, %kind, attempt, ?delay, %error, "transient failure; task rescheduled");
                    } else {
                        counters.postponed.increment(1);
                        tracing::debug!(task_id = lease.id, %kind, attempt, ?delay, %error, "refused before anything was sent; task postponed, the attempt not counted");
                        self.postponed.count(&kind, error);
                    }
                }
                Report::Failed(failed) => {
                    self.summary.failed += 1;
                    counters.failed.increment(1);
                    self.alert.task_failed(&failed);
                    let _ = self.ended.send(lease.id);
                }
                Report::Released => {
                    self.summary.released += 1;
                    counters.released.increment(1);
                }
            }
        }
    }

    /// What the worker did, as far as the database took it.
    pub fn summary(&self) -> RunSummary {
        self.summary
    }
}
