//! The producer: decides how many tasks to claim, holds the leases of those
//! claimed — the heartbeat that renews them, the watchdog that tells a
//! handler to stop once its lease may have run out, the check that starts
//! nothing from a claim answered too late, when a round trip also sweeps
//! for expired leases — and listens for new tasks.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::{self, Held};
use crate::metrics::AttemptCounters;
use crate::store::any::AnyStore;
use crate::store::{ClaimRequest, ClaimedTask, Store};

/// A claimed task cleared to start, with what stops it.
pub(super) struct Cleared {
    pub task: ClaimedTask,
    pub cancel: CancellationToken,
    pub counters: Arc<AttemptCounters>,
}

/// See the module docs.
pub(super) struct Producer {
    claim: ClaimRequest,
    concurrency: usize,
    batch: usize,
    held: Held,
    /// Per kind, registered when the worker was built.
    counters: HashMap<String, Arc<AttemptCounters>>,
    /// Whether due tasks may be waiting: the last claim was full, or
    /// something woke the worker since.
    more: bool,
    /// Woken by the database when another process enqueues (PostgreSQL).
    notified: Arc<Notify>,
    stop: CancellationToken,
    heartbeat: JoinHandle<()>,
    watchdog: JoinHandle<()>,
    /// How often a round trip also sweeps for expired leases.
    sweep_every: std::time::Duration,
    /// When the last sweep was asked for.
    swept_at: Option<Instant>,
    /// A sweep went with a round trip whose answer is not in yet: what it
    /// returned to pending is claimable from the next one.
    swept: bool,
    listener: Option<JoinHandle<()>>,
}

impl Producer {
    /// Starts holding leases for a worker: the heartbeat, the watchdog and,
    /// where the backend can, a listener for new tasks.
    pub async fn start(
        store: &AnyStore,
        claim: ClaimRequest,
        concurrency: usize,
        batch: usize,
        held: Held,
        counters: HashMap<String, Arc<AttemptCounters>>,
    ) -> Self {
        let notified = Arc::new(Notify::new());
        let listener = store.listen(Arc::clone(&notified)).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot LISTEN for new tasks; polling only");
            None
        });
        let stop = CancellationToken::new();
        let heartbeat =
            tokio::spawn(lease::heartbeat(store.clone(), held.clone(), claim.lease, stop.clone()));
        let watchdog = tokio::spawn(lease::watchdog(held.clone(), stop.clone()));
        let sweep_every = lease::sweep_interval(claim.lease);
        Self {
            claim,
            concurrency,
            batch,
            held,
            counters,
            more: true,
            notified,
            stop,
            heartbeat,
            watchdog,
            sweep_every,
            swept_at: None,
            swept: false,
            listener,
        }
    }

    /// Tasks to ask for now: room left by the handlers running and the
    /// claims in flight (`asking`), at most a batch; none unless more may be due.
    pub fn want(&self, asking: usize) -> usize {
        if !self.more {
            return 0;
        }
        self.concurrency.saturating_sub(self.in_flight(asking)).min(self.batch)
    }

    /// Handlers held and tasks asked for.
    pub fn in_flight(&self, asking: usize) -> usize {
        self.held.len() + asking
    }

    /// Whether asking for `want` fills a claim.
    pub fn full(&self, want: usize) -> bool {
        want >= self.batch
    }

    /// The claim to send for `limit` tasks, with a sweep for expired leases
    /// when one is due ([`lease::sweep_interval`]): a claim takes pending
    /// tasks only, so the sweep is how a task whose worker vanished runs again.
    pub fn request(&mut self, limit: usize) -> ClaimRequest {
        let now = Instant::now();
        let sweep = self.swept_at.is_none_or(|at| now >= at + self.sweep_every);
        if sweep {
            self.swept_at = Some(now);
            self.swept = true;
        }
        ClaimRequest { limit, sweep, ..self.claim.clone() }
    }

    /// Due tasks may be waiting: a poll tick, a local enqueue or a notification.
    pub fn wake(&mut self) {
        self.more = true;
    }

    /// Waits for the database's notice of a new task.
    pub async fn notified(&self) {
        self.notified.notified().await;
    }

    /// A round trip that claimed nothing new is not retried at once: a
    /// database error waits, like an empty queue, for a wake-up or a tick.
    pub fn failed(&mut self) {
        self.more = false;
    }

    /// Takes the tasks a claim for `want` asked at `asked` brought: they are
    /// held from now until their lease may run out. None are cleared when
    /// the answer came after that (the database was slow, or this process
    /// was paused): their leases lapse and any worker may claim them.
    pub fn claimed(&mut self, want: usize, asked: Instant, claimed: Vec<ClaimedTask>) -> Vec<Cleared> {
        if want > 0 {
            self.more = claimed.len() == want || std::mem::take(&mut self.swept);
        }
        let deadline = lease::deadline(asked, self.claim.lease);
        if !claimed.is_empty() && Instant::now() >= deadline {
            let ids: Vec<i64> = claimed.iter().map(|task| task.lease.id).collect();
            tracing::warn!(
                task_ids = ?ids,
                answered_after = ?asked.elapsed(),
                lease = ?self.claim.lease,
                "claim answered after its lease may have run out (the database was slow, or this process was paused): not starting these tasks; their leases lapse and any worker may claim them"
            );
            return Vec::new();
        }
        claimed
            .into_iter()
            .map(|task| {
                let cancel = CancellationToken::new();
                let family = crate::task::family_of(&task.kind).and_then(|f| self.counters.get(f));
                let counters = match self.counters.get(&task.kind).or(family) {
                    Some(counters) => Arc::clone(counters),
                    // Claims are filtered on the registered kinds; this is only a fallback.
                    None => AttemptCounters::register(&task.kind),
                };
                self.held.insert(task.lease, cancel.clone(), Arc::clone(&counters), deadline);
                Cleared { task, cancel, counters }
            })
            .collect()
    }

    /// Stops renewing and watching, and listening.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.heartbeat.await;
        let _ = self.watchdog.await;
        if let Some(listener) = self.listener {
            listener.abort();
        }
    }
}
