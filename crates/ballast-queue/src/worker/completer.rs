//! The completer: keeps the outcomes of finished attempts until the next
//! round trip writes them as one batch, with the producer's next claim;
//! then counts, logs and alerts what the database took, and what it refused
//! because the lease had been lost.

use std::sync::Arc;
use std::time::Duration;

use crate::alert::{Alert, FailedTask};
use crate::metrics::AttemptCounters;
use crate::outcome::Outcome;
use crate::store::Lease;

use super::RunSummary;

/// An outcome with what to tell once it is written.
#[derive(Debug)]
pub(super) struct Settling {
    pub outcome: Outcome,
    /// The attempt counters of the task's kind.
    pub counters: Arc<AttemptCounters>,
    pub report: Report,
}

/// What is logged, counted and alerted once an outcome is written.
#[derive(Debug)]
pub(super) enum Report {
    Completed,
    Rescheduled { kind: String, attempt: u32, delay: Duration },
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

/// See the module docs.
pub(super) struct Completer {
    pending: Batch,
    alert: Arc<dyn Alert>,
    summary: RunSummary,
}

impl Completer {
    pub fn new(alert: Arc<dyn Alert>) -> Self {
        Self { pending: Batch::default(), alert, summary: RunSummary::default() }
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

    /// Everything waiting, for one round trip.
    pub fn take(&mut self) -> Batch {
        std::mem::take(&mut self.pending)
    }

    /// A batch whose round trip failed: it goes first in the next one.
    pub fn put_back(&mut self, mut batch: Batch) {
        batch.outcomes.append(&mut self.pending.outcomes);
        batch.reports.append(&mut self.pending.reports);
        self.pending = batch;
    }

    /// A batch the database took, but for the outcomes in `refused`.
    pub fn settled(&mut self, batch: Batch, refused: &[Lease]) {
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
                }
                Report::Rescheduled { kind, attempt, delay } => {
                    self.summary.rescheduled += 1;
                    let Outcome::Rescheduled { error, counted, .. } = outcome else { continue };
                    if *counted {
                        counters.retried.increment(1);
                        tracing::info!(task_id = lease.id, %kind, attempt, ?delay, %error, "transient failure; task rescheduled");
                    } else {
                        counters.postponed.increment(1);
                        tracing::info!(task_id = lease.id, %kind, attempt, ?delay, %error, "refused before anything was sent; task postponed, the attempt not counted");
                    }
                }
                Report::Failed(failed) => {
                    self.summary.failed += 1;
                    counters.failed.increment(1);
                    self.alert.task_failed(&failed);
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
