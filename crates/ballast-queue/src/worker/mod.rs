//! The worker, in River's three parts: the [`producer`] claims due tasks
//! and holds their leases, the [`executor`] runs their handlers under the
//! leases' cancellation, and the [`completer`] writes every outcome in
//! batches, each round trip with the next claim. The [`builder`] checks a
//! worker's settings; a [`run`] joins the three parts until shutdown. It
//! speaks to the database only through the store interface.

mod builder;
mod completer;
mod executor;
mod postponed;
mod producer;
mod run;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::AttemptCounters;
use crate::store::ClaimRequest;
use crate::Queue;

pub use builder::{WorkerBuildError, WorkerBuilder};
use executor::Attempts;

/// How long finished tasks may wait for the handlers still running, so that
/// one round trip completes a whole batch and claims the next (a completed
/// task's lease is no longer renewed meanwhile: keep this far below a lease).
const LINGER: Duration = Duration::from_millis(2);

/// Round trips a worker keeps in flight at most, when its concurrency leaves
/// room for several batches: while one commits, the next claims, so a single
/// worker is not held to one commit at a time.
const MAX_PIPELINE: usize = 4;

/// Runs handlers for the tasks of the kinds it was given.
///
/// Several workers, in one process or many, can share a queue: each claims
/// with its own lease, and a task whose lease expires (its worker died) is
/// returned to pending by the sweep any of them sends with a round trip
/// every quarter lease (between 100 ms and 5 s), then claimed again: a task
/// whose worker vanished runs again within its lease and a sweep interval (a
/// claim itself walks pending tasks only).
///
/// # What a lease guarantees
///
/// - **Fencing protects the table.** Every statement that completes, fails,
///   reschedules, renews or releases an attempt names the attempt's lease
///   token: once the lease has run out and another worker has claimed the
///   task (or an operator cancelled it), nothing this worker writes changes
///   the task, and the newer attempt's outcome stands.
/// - **The idempotency key protects the upstream.** A task can still run more
///   than once: its worker may die or stall after calling the upstream and
///   before recording the outcome. Send [`TaskContext::key`](crate::TaskContext::key) with every call
///   so the upstream applies it once.
/// - **A resumed worker does not start work it no longer holds.** The worker
///   counts each lease on its own monotonic clock from the moment it asked
///   for the claim or the renewal (the database counts from later), less a
///   margin of 1/500 of the lease for clocks running at different rates.
///   Right before a handler starts, a task whose lease may have run out by
///   that count is dropped instead: its handler never runs, its lease lapses,
///   and any worker may claim it. This covers a process stopped past its
///   lease (SIGSTOP, a debugger, a paused VM), a claim answered late, and a
///   runtime too busy to start the handler in time.
/// - **A handler already running when its lease is lost is told to stop**
///   through its cancellation token ([`TaskContext::cancellation`](crate::TaskContext::cancellation)), as soon
///   as the lease may have run out without a renewal (the database is
///   unreachable or slow, the process was paused) or a renewal finds the
///   task taken. This is best effort: the handler may already have sent its
///   request, which is why the key exists.
///
/// Not covered by the local count: a step of the wall clock the database
/// measures with (on SQLite, each process's), and time the host spends
/// suspended, which the monotonic clock does not count on Linux. Fencing and
/// the key hold regardless.
pub struct Worker {
    queue: Queue,
    claim: ClaimRequest,
    concurrency: usize,
    batch: usize,
    /// Round trips in flight at most: one per `batch` the concurrency holds,
    /// up to [`MAX_PIPELINE`].
    pipeline: usize,
    poll_interval: Duration,
    grace: Duration,
    attempts: Attempts,
    /// Per kind, registered once.
    counters: HashMap<String, Arc<AttemptCounters>>,
    /// Enqueued every period while the worker runs.
    periodic: Vec<crate::Periodic>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("owner", &self.claim.owner)
            .field("kinds", &self.claim.kinds)
            .field("concurrency", &self.concurrency)
            .field("batch", &self.batch)
            .field("pipeline", &self.pipeline)
            .field("lease", &self.claim.lease)
            .field("poll_interval", &self.poll_interval)
            .field("grace", &self.grace)
            .finish_non_exhaustive()
    }
}

/// What a worker did between [`Worker::run`] and its return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Tasks completed.
    pub completed: u64,
    /// Attempts that failed transiently and were rescheduled.
    pub rescheduled: u64,
    /// Tasks marked failed.
    pub failed: u64,
    /// Outcomes refused because the lease had been lost (someone else owns the task now).
    pub lost: u64,
    /// Tasks handed back at shutdown because their handlers overran the grace period.
    pub released: u64,
}

impl Worker {
    /// Starts configuring a worker for `queue`; it polls and backs off by
    /// the queue's [`schedule`](Queue::schedule) unless told otherwise.
    pub fn builder(queue: Queue) -> WorkerBuilder {
        WorkerBuilder::new(queue)
    }

    /// The name this worker writes into `lease_owner`.
    pub fn owner(&self) -> &str {
        &self.claim.owner
    }

    /// Runs until `shutdown` is cancelled, then stops claiming, gives in-flight
    /// handlers the grace period to finish, and releases the tasks of those
    /// that did not so another worker takes them at once.
    ///
    /// Database errors are logged and retried; they never stop the worker.
    pub async fn run(self, shutdown: CancellationToken) -> RunSummary {
        run::run(self, shutdown).await
    }
}
