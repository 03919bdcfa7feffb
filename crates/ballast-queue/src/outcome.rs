//! How an attempt ended, as the store writes it: the one vocabulary of the
//! worker's completer and of every backend (River's `JobSetStateIfRunning`).
//!
//! Every outcome is fenced by its [`Lease`]: a store applies it only while
//! the task is still `running` under that lease token, and reports the ones
//! it refused. A batch of outcomes is written in one transaction, with the
//! next claim where the backend allows (see `Store::settle_and_claim`).

use std::time::Duration;

use crate::store::{Lease, ValidTask};

/// What becomes of one running task.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The handler succeeded: final, with what it reported
    /// ([`TaskContext::set_result`](crate::TaskContext::set_result)) as JSON
    /// text; `follow_ups` (its [`Handler::on_end`](crate::Handler::on_end)
    /// tasks) enqueued in the same transaction, only if the lease still held.
    Completed { lease: Lease, result: Option<String>, follow_ups: Vec<ValidTask> },
    /// A transient failure: pending again after `delay`, `error` recorded;
    /// unless `counted`, the attempt is given back (it reached nothing
    /// outside the process); with a `payload`, the next attempt gets it
    /// ([`TaskContext::set_next_payload`](crate::TaskContext::set_next_payload)).
    Rescheduled { lease: Lease, delay: Duration, error: String, counted: bool, payload: Option<String> },
    /// Final failure, `error` recorded; `follow_ups` (the alert's tasks and
    /// the handler's [`on_end`](crate::Handler::on_end) ones) are
    /// enqueued in the same transaction, and only if the lease still held.
    Failed { lease: Lease, error: String, follow_ups: Vec<ValidTask> },
    /// Handed back unfinished (shutdown): pending and due now, the
    /// abandoned attempt not counted.
    Released { lease: Lease },
}

impl Outcome {
    /// The lease that fences this outcome.
    pub fn lease(&self) -> Lease {
        match self {
            Outcome::Completed { lease, .. }
            | Outcome::Rescheduled { lease, .. }
            | Outcome::Failed { lease, .. }
            | Outcome::Released { lease } => *lease,
        }
    }

    /// One letter per outcome, as PostgreSQL's SQL distinguishes them.
    #[cfg(feature = "postgres")]
    pub fn code(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "c",
            Outcome::Rescheduled { .. } => "r",
            Outcome::Failed { .. } => "f",
            Outcome::Released { .. } => "x",
        }
    }

    /// The error an outcome records, if it records one.
    #[cfg(feature = "postgres")]
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Rescheduled { error, .. } | Outcome::Failed { error, .. } => Some(error),
            Outcome::Completed { .. } | Outcome::Released { .. } => None,
        }
    }

    /// The follow-up tasks an outcome enqueues (a failure's alerts, a
    /// handler's [`on_end`](crate::Handler::on_end) tasks).
    pub fn follow_ups(&self) -> &[ValidTask] {
        match self {
            Outcome::Failed { follow_ups, .. } | Outcome::Completed { follow_ups, .. } => follow_ups,
            _ => &[],
        }
    }
}
