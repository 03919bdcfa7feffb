//! The worker: claims due tasks, runs their handlers, records the outcome.
//! It speaks to the database only through the store interface.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use ballast::{IdempotencyKey, Rule};
use futures_util::FutureExt;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::alert::{Alert, FailReason, FailedTask, LogAlert};
use crate::durable_backoff::DurableBackoff;
use crate::error::{Error, Result};
use crate::handler::{AttemptError, Erased, ErasedHandler, Handler, TaskContext};
use crate::lease::{self, Held};
use crate::metrics::AttemptCounters;
use crate::store::any::AnyStore;
use crate::store::{ClaimRequest, ClaimedTask, Lease, Store, ValidTask};
use crate::Queue;

/// Polling interval when nothing wakes the worker earlier (R-RES-RE-5).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long a claim holds a task without a heartbeat unless
/// [`WorkerBuilder::lease`] says otherwise: a task whose worker died is
/// claimable again this long after its last heartbeat.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long finished tasks may wait for the handlers still running, so that
/// one round trip completes a whole batch and claims the next (a completed
/// task's lease is no longer renewed meanwhile: keep this far below a lease).
const LINGER: Duration = Duration::from_millis(2);

/// Round trips a worker keeps in flight at most, when its concurrency leaves
/// room for several batches: while one commits, the next claims, so a single
/// worker is not held to one commit at a time.
const MAX_PIPELINE: usize = 4;

/// The shortest wait of a task postponed unsent, so a refusal that names
/// no wait (a probe due now) cannot make the task spin through claims.
const MIN_POSTPONE: Duration = Duration::from_millis(100);

/// Handlers running at once when not configured.
pub const DEFAULT_CONCURRENCY: usize = 200;

/// Tasks claimed per round trip at most when not configured.
pub const DEFAULT_BATCH: usize = 50;

/// Runs handlers for the tasks of the kinds it was given.
///
/// Several workers, in one process or many, can share a queue: each claims
/// with its own lease, and a task whose lease expires (its worker died) is
/// claimed again by any of them.
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
///   before recording the outcome. Send [`TaskContext::key`] with every call
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
///   through its cancellation token ([`TaskContext::cancellation`]), as soon
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
    shared: Arc<Shared>,
    queue: Queue,
    claim: ClaimRequest,
    concurrency: usize,
    batch: usize,
    /// Round trips in flight at most: one per `batch` the concurrency holds,
    /// up to [`MAX_PIPELINE`].
    pipeline: usize,
    poll_interval: Duration,
    grace: Duration,
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

/// Configures a [`Worker`]; see [`Worker::builder`].
pub struct WorkerBuilder {
    queue: Queue,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    duplicate: Option<String>,
    concurrency: usize,
    batch: usize,
    poll_interval: Duration,
    lease: Duration,
    grace: Duration,
    backoff: DurableBackoff,
    alert: Arc<dyn Alert>,
    owner: Option<String>,
    seed: Option<u64>,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("kinds", &self.handlers.keys().collect::<Vec<_>>())
            .field("concurrency", &self.concurrency)
            .field("batch", &self.batch)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// Runs tasks of `kind` with `handler`.
    pub fn handler<H: Handler>(mut self, kind: impl Into<String>, handler: H) -> Self {
        let kind = kind.into();
        let erased: Arc<dyn ErasedHandler> = Arc::new(Erased(Arc::new(handler)));
        if self.handlers.insert(kind.clone(), erased).is_some() {
            self.duplicate = Some(kind);
        }
        self
    }

    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`], 200). With
    /// room for several batches the worker keeps up to 4 round trips in
    /// flight, so one worker per process is enough.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Tasks claimed per round trip at most (default [`DEFAULT_BATCH`], 50;
    /// never more than the concurrency).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n;
        self
    }

    /// How often to look for due tasks when nothing wakes the worker
    /// (default: the queue's [`DurableSchedule`](crate::DurableSchedule), 5 s
    /// unless set; on PostgreSQL new tasks wake it through LISTEN/NOTIFY).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// How long a claim holds a task without a heartbeat (default 30 s). The
    /// worker renews it every third of that while the handler runs; if the
    /// worker dies, the task is claimable again once the lease runs out. A
    /// handler whose lease could not be renewed in time is told to stop (see
    /// [`Worker`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// On shutdown, how long in-flight handlers may run before they are
    /// stopped and their tasks released (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Delay between attempts after a transient error (default: the queue's
    /// [`DurableSchedule`](crate::DurableSchedule), 2^n s ≤ 1 h unless set).
    pub fn backoff(mut self, backoff: DurableBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Told about every task that fails for good (default: [`LogAlert`]).
    pub fn alert(mut self, alert: impl Alert) -> Self {
        self.alert = Arc::new(alert);
        self
    }

    /// Names the worker in `lease_owner` (default: host, process id, random suffix).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Seeds the backoff jitter, for reproducible tests.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Checks the settings and builds the worker.
    pub fn build(self) -> Result<Worker> {
        if let Some(kind) = self.duplicate {
            return Err(Error::Config(format!(
                "kind {kind:?} has two handlers: register one handler per kind"
            )));
        }
        if self.handlers.is_empty() {
            return Err(Error::Config("no handlers: register one with .handler(kind, handler)".into()));
        }
        for kind in self.handlers.keys() {
            crate::task::check_kind(kind)?;
        }
        if self.concurrency == 0 || self.batch == 0 {
            return Err(Error::Config("concurrency and batch must be at least 1".into()));
        }
        if self.lease < Duration::from_millis(30) || self.poll_interval.is_zero() {
            return Err(Error::Config(
                "lease must be at least 30 ms (30 s is typical) and poll_interval above zero".into(),
            ));
        }
        let owner = self.owner.unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
            let suffix = uuid::Uuid::now_v7().simple().to_string();
            format!("{host}:{}:{}", std::process::id(), &suffix[suffix.len() - 6..])
        });
        let rng = match self.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::from_rng(&mut rand::rng()),
        };
        let mut kinds: Vec<String> = self.handlers.keys().cloned().collect();
        kinds.sort();
        Ok(Worker {
            shared: Arc::new(Shared {
                store: self.queue.store.clone(),
                max_attempts: self.queue.schedule.max_attempts,
                handlers: self.handlers,
                alert: self.alert,
                backoff: self.backoff,
                rng: Mutex::new(rng),
                held: Held::default(),
                counts: Counts::default(),
                counters: kinds.iter().map(|kind| (kind.clone(), AttemptCounters::register(kind))).collect(),
            }),
            claim: ClaimRequest { kinds: kinds.into(), owner: owner.into(), limit: 0, lease: self.lease },
            queue: self.queue,
            concurrency: self.concurrency,
            batch: self.batch.min(self.concurrency),
            pipeline: (self.concurrency / self.batch.min(self.concurrency)).clamp(1, MAX_PIPELINE),
            poll_interval: self.poll_interval,
            grace: self.grace,
        })
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

#[derive(Debug, Default)]
struct Counts {
    completed: AtomicU64,
    rescheduled: AtomicU64,
    failed: AtomicU64,
    lost: AtomicU64,
    released: AtomicU64,
}

impl Counts {
    fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    fn summary(&self) -> RunSummary {
        RunSummary {
            completed: self.completed.load(Ordering::Relaxed),
            rescheduled: self.rescheduled.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
        }
    }
}

struct Shared {
    store: AnyStore,
    /// For the alert's tasks, as the queue's schedule says.
    max_attempts: u32,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    alert: Arc<dyn Alert>,
    backoff: DurableBackoff,
    rng: Mutex<SmallRng>,
    held: Held,
    counts: Counts,
    /// Per kind, registered once.
    counters: HashMap<String, Arc<AttemptCounters>>,
}

/// What a spawned attempt tells the run loop when it is over.
enum Finished {
    /// The handler succeeded: the task is completed with the next exchange.
    Succeeded(Lease, Arc<AttemptCounters>),
    /// Nothing left to do: the outcome was stored (or refused), or the
    /// handler never started because the lease may have run out.
    Settled(Lease),
}

/// Successes not reported yet, with their kind's counters.
#[derive(Default)]
struct Done {
    leases: Vec<Lease>,
    counters: Vec<Arc<AttemptCounters>>,
}

impl Done {
    fn len(&self) -> usize {
        self.leases.len()
    }

    fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }
}

impl Worker {
    /// Starts configuring a worker for `queue`; it polls and backs off by
    /// the queue's [`schedule`](Queue::schedule) unless told otherwise.
    pub fn builder(queue: Queue) -> WorkerBuilder {
        let schedule = queue.schedule;
        WorkerBuilder {
            queue,
            handlers: HashMap::new(),
            duplicate: None,
            concurrency: DEFAULT_CONCURRENCY,
            batch: DEFAULT_BATCH,
            poll_interval: schedule.poll_interval,
            lease: DEFAULT_LEASE,
            grace: Duration::from_secs(30),
            backoff: schedule.backoff,
            alert: Arc::new(LogAlert),
            owner: None,
            seed: None,
        }
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
        let store = self.shared.store.clone();
        let held = self.shared.held.clone();
        let pg_wake = Arc::new(Notify::new());
        let listener = store.listen(Arc::clone(&pg_wake)).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot LISTEN for new tasks; polling only");
            None
        });
        let stop_heartbeat = CancellationToken::new();
        let heartbeat = tokio::spawn(lease::heartbeat(
            store.clone(),
            held.clone(),
            self.claim.lease,
            stop_heartbeat.clone(),
        ));
        let watchdog = tokio::spawn(lease::watchdog(held.clone(), stop_heartbeat.clone()));
        let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
        let mut running = JoinSet::new();
        let mut done = Done::default();
        let mut more = true;
        let mut poll = tokio::time::interval_at(Instant::now() + self.poll_interval, self.poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);

        // Round trips in flight, and the tasks they ask for: those count
        // against the concurrency as if they were running already.
        let mut exchanges: JoinSet<Answer> = JoinSet::new();
        let mut asking = 0;
        // When the current round trip may wait for the handlers still running.
        let mut linger_until: Option<Instant> = None;
        // After a database error: no round trip before then.
        let mut retry_at: Option<Instant> = None;
        while !shutdown.is_cancelled() {
            while let Ok(finished) = rx.try_recv() {
                self.finished(finished, &mut done);
            }
            while running.try_join_next().is_some() {}
            while let Some(answer) = exchanges.try_join_next() {
                let answer = answer.expect("a round trip does not panic");
                asking -= answer.want;
                self.answered(answer, &mut done, &mut more, &mut retry_at, &mut running, &tx);
            }
            let in_flight = held.len() + asking;
            let want = if more { self.concurrency.saturating_sub(in_flight).min(self.batch) } else { 0 };
            let backing_off = retry_at.is_some_and(|at| Instant::now() < at);
            if (want > 0 || !done.is_empty()) && exchanges.len() < self.pipeline && !backing_off {
                retry_at = None;
                // One round trip completes and claims a whole batch: while
                // handlers are still running and neither side of the exchange
                // is full, wait for them, at most LINGER.
                let full = in_flight == 0 || want >= self.batch || done.len() >= self.batch;
                if !full {
                    let deadline = *linger_until.get_or_insert_with(|| Instant::now() + LINGER);
                    if Instant::now() < deadline {
                        tokio::select! {
                            _ = shutdown.cancelled() => {}
                            Some(finished) = rx.recv() => self.finished(finished, &mut done),
                            Some(answer) = exchanges.join_next() => {
                                let answer = answer.expect("a round trip does not panic");
                                asking -= answer.want;
                                self.answered(answer, &mut done, &mut more, &mut retry_at, &mut running, &tx);
                            }
                            _ = tokio::time::sleep_until(deadline) => {}
                        }
                        continue;
                    }
                }
                linger_until = None;
                asking += want;
                self.ask(&mut done, want, &mut exchanges);
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => {}
                Some(finished) = rx.recv() => self.finished(finished, &mut done),
                Some(answer) = exchanges.join_next() => {
                    let answer = answer.expect("a round trip does not panic");
                    asking -= answer.want;
                    self.answered(answer, &mut done, &mut more, &mut retry_at, &mut running, &tx);
                }
                _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if backing_off => {}
                _ = poll.tick() => more = true,
                _ = self.queue.wake.notified() => more = true,
                _ = pg_wake.notified() => more = true,
            }
        }
        // Claims already sent: their tasks run (or are released) like the others.
        while let Some(answer) = exchanges.join_next().await {
            let answer = answer.expect("a round trip does not panic");
            self.answered(answer, &mut done, &mut more, &mut retry_at, &mut running, &tx);
        }

        let deadline = Instant::now() + self.grace;
        while held.len() > 0 {
            tokio::select! {
                Some(finished) = rx.recv() => self.finished(finished, &mut done),
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        held.cancel_all();
        running.abort_all();
        while running.join_next().await.is_some() {}
        while let Ok(finished) = rx.try_recv() {
            self.finished(finished, &mut done);
        }
        if !done.is_empty() {
            let mut last = JoinSet::new();
            self.ask(&mut done, 0, &mut last);
            if let Some(Ok(answer)) = last.join_next().await {
                self.answered(answer, &mut done, &mut more, &mut retry_at, &mut running, &tx);
            }
        }
        let abandoned = held.leases();
        if !abandoned.is_empty() {
            match store.release(&abandoned).await {
                Ok(released) => {
                    Counts::bump(&self.shared.counts.released, released.len() as u64);
                    for id in released {
                        if let Some(counters) = held.counters(id) {
                            counters.released.increment(1);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not release leases at shutdown; they expire on their own")
                }
            }
        }
        stop_heartbeat.cancel();
        let _ = heartbeat.await;
        let _ = watchdog.await;
        if let Some(listener) = listener {
            listener.abort();
        }
        self.shared.counts.summary()
    }

    fn finished(&self, finished: Finished, done: &mut Done) {
        match finished {
            Finished::Succeeded(lease, counters) => {
                self.shared.held.remove(lease);
                done.leases.push(lease);
                done.counters.push(counters);
            }
            Finished::Settled(lease) => self.shared.held.remove(lease),
        }
    }

    /// Sends `done` and a claim for up to `want` tasks as one round trip,
    /// running beside this loop; [`answered`](Self::answered) takes its answer.
    fn ask(&self, done: &mut Done, want: usize, exchanges: &mut JoinSet<Answer>) {
        let claim = ClaimRequest { limit: want, ..self.claim.clone() };
        let store = self.shared.store.clone();
        let done = std::mem::take(done);
        exchanges.spawn(async move {
            let asked = Instant::now();
            let result = store.complete_and_claim(&done.leases, &claim).await;
            Answer { done, want, asked, result }
        });
    }

    /// Counts the completions of an answered round trip and spawns the
    /// handlers of the tasks it claimed. On a database error the completions
    /// are kept for the next try, which waits a moment.
    fn answered(
        &self,
        answer: Answer,
        done: &mut Done,
        more: &mut bool,
        retry_at: &mut Option<Instant>,
        running: &mut JoinSet<()>,
        tx: &mpsc::UnboundedSender<Finished>,
    ) {
        let Answer { done: sent, want, asked, result } = answer;
        let exchange = match result {
            Ok(exchange) => exchange,
            Err(e) => {
                tracing::error!(error = %e, "claiming tasks failed; retrying shortly");
                done.leases.extend(sent.leases);
                done.counters.extend(sent.counters);
                *more = false;
                *retry_at = Some(Instant::now() + self.poll_interval.min(Duration::from_secs(1)));
                return;
            }
        };
        let counts = &self.shared.counts;
        Counts::bump(&counts.completed, (sent.len() - exchange.refused.len()) as u64);
        Counts::bump(&counts.lost, exchange.refused.len() as u64);
        for lost in &exchange.refused {
            tracing::warn!(
                task_id = lost.id,
                "completion refused: the lease was lost (expired and re-claimed, or cancelled); the newer attempt's outcome stands"
            );
        }
        if exchange.refused.is_empty() {
            sent.counters.iter().for_each(|c| c.completed.increment(1));
        } else {
            for (lease, c) in sent.leases.iter().zip(&sent.counters) {
                let counter = if exchange.refused.contains(lease) { &c.lost } else { &c.completed };
                counter.increment(1);
            }
        }
        let claimed = exchange.claimed.len();
        if want > 0 {
            *more = claimed == want;
        }
        let deadline = lease::deadline(asked, self.claim.lease);
        if claimed > 0 && Instant::now() >= deadline {
            let ids: Vec<i64> = exchange.claimed.iter().map(|task| task.lease.id).collect();
            tracing::warn!(
                task_ids = ?ids,
                answered_after = ?asked.elapsed(),
                lease = ?self.claim.lease,
                "claim answered after its lease may have run out (the database was slow, or this process was paused): not starting these tasks; their leases lapse and any worker may claim them"
            );
            return;
        }
        for task in exchange.claimed {
            let cancel = CancellationToken::new();
            let counters = self.shared.counters(&task.kind);
            self.shared.held.insert(task.lease, cancel.clone(), Arc::clone(&counters), deadline);
            let shared = Arc::clone(&self.shared);
            let tx = tx.clone();
            running.spawn(async move {
                let lease = task.lease;
                let finished = match shared.attempt(task, cancel).await {
                    Some(lease) => Finished::Succeeded(lease, counters),
                    None => Finished::Settled(lease),
                };
                // The receiver lives until run() returns, after every handler.
                let _ = tx.send(finished);
            });
        }
    }
}

/// What a round trip brings back, with what it was sent.
struct Answer {
    done: Done,
    want: usize,
    asked: Instant,
    result: Result<crate::store::Exchange>,
}

fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

impl Shared {
    /// The attempt counters of `kind`, registered when the worker was built.
    fn counters(&self, kind: &str) -> Arc<AttemptCounters> {
        match self.counters.get(kind) {
            Some(counters) => Arc::clone(counters),
            // Claims are filtered on the registered kinds; this is only a fallback.
            None => AttemptCounters::register(kind),
        }
    }

    /// Runs one attempt and stores its outcome, except success, which the
    /// caller batches; returns the lease to complete on success.
    async fn attempt(&self, task: ClaimedTask, cancel: CancellationToken) -> Option<Lease> {
        // Checked here, as late as possible before the handler: spawning can
        // be delayed, and the process paused, past the lease.
        if let Err(late) = self.held.start(task.lease) {
            tracing::warn!(
                task_id = task.lease.id,
                kind = %task.kind,
                ?late,
                "lease may have run out before the handler started (this process was paused or overloaded): not starting it; any worker may claim the task"
            );
            return None;
        }
        let (attempt, max) = (count(task.attempt), count(task.max_attempts));
        if attempt > max {
            let error =
                format!("the lease of the last attempt ({max} of {max}) expired: its worker died or hung");
            return self.fail(&task, FailReason::LeaseExpired, error).await;
        }
        let Some(handler) = self.handlers.get(&task.kind) else {
            // Claims filter on this worker's kinds, so this only follows a kind rename mid-flight.
            let error = format!("no handler registered for kind {:?}", task.kind);
            return self.fail(&task, FailReason::Permanent, error).await;
        };
        let key = match task.key.as_deref().map(IdempotencyKey::parse).transpose() {
            Ok(key) => key,
            Err(e) => {
                let error = format!("stored idempotency key is invalid: {e}");
                return self.fail(&task, FailReason::BadPayload, error).await;
            }
        };
        let context = TaskContext {
            id: task.lease.id,
            kind: Arc::from(task.kind.as_str()),
            attempt,
            max_attempts: max,
            key,
            cancel,
            result: Arc::default(),
            not_attempted: Arc::default(),
        };
        let result = Arc::clone(&context.result);
        let probe = context.clone();
        let outcome = AssertUnwindSafe(handler.call(context, &task.payload)).catch_unwind().await;
        match outcome {
            Ok(Ok(())) => {
                let result = result.lock().unwrap_or_else(PoisonError::into_inner).take();
                match result {
                    Some(result) => self.keep_result(&task, &result).await,
                    None => Some(task.lease),
                }
            }
            Ok(Err(AttemptError::BadPayload(error))) => self.fail(&task, FailReason::BadPayload, error).await,
            Ok(Err(AttemptError::Failed { message, class }))
                if class.is_transient() && (attempt < max || !probe.was_attempted()) =>
            {
                let counted = probe.was_attempted();
                let delay = match class.retry_after {
                    // Refused unsent, with a time it will be let through: then, not later.
                    Some(after) if !counted => after.max(MIN_POSTPONE),
                    retry_after => {
                        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
                        let delay = self.backoff.delay(attempt, &mut *rng);
                        retry_after.map_or(delay, |after| after.max(delay))
                    }
                };
                self.held.finishing(task.lease);
                match self.store.reschedule(task.lease, delay, &message, counted).await {
                    Ok(true) if counted => {
                        Counts::bump(&self.counts.rescheduled, 1);
                        self.counters(&task.kind).retried.increment(1);
                        tracing::info!(task_id = task.lease.id, kind = %task.kind, attempt, ?delay, error = %message, "transient failure; task rescheduled");
                    }
                    Ok(true) => {
                        Counts::bump(&self.counts.rescheduled, 1);
                        self.counters(&task.kind).postponed.increment(1);
                        tracing::info!(task_id = task.lease.id, kind = %task.kind, attempt, ?delay, error = %message, "refused before anything was sent; task postponed, the attempt not counted");
                    }
                    Ok(false) => self.lost(&task),
                    Err(e) => {
                        tracing::error!(task_id = task.lease.id, error = %e, "could not reschedule; the task runs again when its lease expires")
                    }
                }
                None
            }
            Ok(Err(AttemptError::Failed { message, class })) if class.is_transient() => {
                self.fail(&task, FailReason::Exhausted, message).await
            }
            Ok(Err(AttemptError::Failed { message, .. })) => {
                self.fail(&task, FailReason::Permanent, message).await
            }
            Err(panic) => {
                let error = format!("handler panicked: {}", panic_message(&*panic));
                self.fail(&task, FailReason::Panicked, error).await
            }
        }
    }

    /// Marks the task failed and alerts; always returns `None` (nothing to complete).
    async fn fail(&self, task: &ClaimedTask, reason: FailReason, error: String) -> Option<Lease> {
        self.held.finishing(task.lease);
        let failed = FailedTask {
            id: task.lease.id,
            kind: task.kind.clone(),
            key: task.key.clone(),
            attempt: count(task.attempt),
            max_attempts: count(task.max_attempts),
            reason,
            error,
            failed_at: SystemTime::now(),
            failure_id: task.lease.token,
        };
        let follow_ups = self.follow_ups(&failed);
        match self.store.fail(task.lease, &failed.error, &follow_ups).await {
            Ok(true) => {
                Counts::bump(&self.counts.failed, 1);
                self.counters(&task.kind).failed.increment(1);
                self.alert.task_failed(&failed);
            }
            Ok(false) => self.lost(task),
            Err(e) => {
                tracing::error!(task_id = task.lease.id, error = %e, "could not mark the task failed; it runs again when its lease expires")
            }
        }
        None
    }

    /// Stores a successful attempt's result ahead of its batched completion;
    /// returns the lease to complete, unless it was lost meanwhile.
    async fn keep_result(&self, task: &ClaimedTask, result: &str) -> Option<Lease> {
        match self.store.set_result(task.lease, result).await {
            Ok(true) => Some(task.lease),
            Ok(false) => {
                self.held.finishing(task.lease);
                self.lost(task);
                None
            }
            Err(e) => {
                tracing::error!(task_id = task.lease.id, error = %e, "could not store the task's result; it completes without one");
                Some(task.lease)
            }
        }
    }

    /// The alert's tasks for `failed`, validated; one that cannot be stored
    /// is logged and left out so that the failure itself is still recorded.
    fn follow_ups(&self, failed: &FailedTask) -> Vec<ValidTask> {
        let tasks = self.alert.enqueue(failed);
        let mut valid = Vec::with_capacity(tasks.len());
        for task in tasks {
            let kind = task.kind().to_owned();
            match task.validate(self.max_attempts) {
                Ok(task) => valid.push(task),
                Err(e) => tracing::error!(
                    rule = Rule::Re5.id(),
                    task_id = failed.id,
                    alert_kind = %kind,
                    error = %e,
                    "the alert's task is invalid and was not enqueued; only the log line tells of this failure"
                ),
            }
        }
        valid
    }

    fn lost(&self, task: &ClaimedTask) {
        Counts::bump(&self.counts.lost, 1);
        self.counters(&task.kind).lost.increment(1);
        tracing::warn!(
            task_id = task.lease.id,
            kind = %task.kind,
            "outcome refused: the lease was lost (expired and re-claimed, or cancelled); the newer attempt's outcome stands"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use ballast::{Classification, Classify};
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;
    use crate::NewTask;

    #[derive(Debug)]
    struct Declined(Classification);

    impl fmt::Display for Declined {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("declined")
        }
    }

    impl Classify for Declined {
        fn classify(&self) -> Classification {
            self.0
        }
    }

    /// Fails every attempt, transiently or for good.
    struct Failing(Classification);

    impl Handler for Failing {
        type Payload = u64;
        type Error = Declined;

        async fn handle(&self, _: TaskContext, _: u64) -> std::result::Result<(), Declined> {
            Err(Declined(self.0))
        }
    }

    /// Everything logged at debug level and above while the test runs.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Logs {
        type Writer = Logs;

        fn make_writer(&self) -> Logs {
            self.clone()
        }
    }

    impl Logs {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    /// A worker built on a queue follows the queue's schedule unless told otherwise.
    #[tokio::test]
    async fn a_worker_polls_and_backs_off_by_its_queue_s_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
        let schedule = crate::DurableSchedule {
            poll_interval: Duration::from_millis(250),
            backoff: DurableBackoff::exponential(Duration::from_millis(10)),
            max_attempts: 3,
            ..Default::default()
        };
        let queue = queue.with_schedule(schedule);
        let worker = Worker::builder(queue.clone())
            .handler("k", Failing(Classification::permanent()))
            .build()
            .unwrap();
        assert_eq!(
            (worker.poll_interval, worker.shared.backoff, worker.shared.max_attempts),
            (schedule.poll_interval, schedule.backoff, 3)
        );
        let told = Worker::builder(queue)
            .handler("k", Failing(Classification::permanent()))
            .poll_interval(Duration::from_secs(1))
            .build()
            .unwrap();
        assert_eq!(told.poll_interval, Duration::from_secs(1));
    }

    /// A heartbeat round that began before the handlers returned reaches the
    /// database after the worker stored their outcomes (rescheduled, failed):
    /// the leases it finds gone were given up by this worker, not lost.
    #[tokio::test]
    async fn heartbeat_racing_the_task_s_own_outcome_reports_no_lost_lease() {
        let logs = Logs::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);

        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
        queue.migrate().await.unwrap();
        queue.enqueue(NewTask::new("flaky", &1)).await.unwrap();
        queue.enqueue(NewTask::new("broken", &2)).await.unwrap();
        let worker = Worker::builder(queue)
            .handler("flaky", Failing(Classification::transient()))
            .handler("broken", Failing(Classification::permanent()))
            .build()
            .unwrap();
        let shared = &worker.shared;
        let claim = ClaimRequest { limit: 2, ..worker.claim.clone() };
        let claimed = shared.store.complete_and_claim(&[], &claim).await.unwrap().claimed;
        assert_eq!(claimed.len(), 2);
        let deadline = lease::deadline(Instant::now(), worker.claim.lease);
        for task in &claimed {
            shared.held.insert(task.lease, CancellationToken::new(), shared.counters(&task.kind), deadline);
        }

        let round = shared.held.leases();
        for task in claimed {
            assert_eq!(shared.attempt(task, CancellationToken::new()).await, None);
        }
        lease::renew(&shared.store, &shared.held, &round, worker.claim.lease).await;

        let summary = shared.counts.summary();
        assert_eq!((summary.rescheduled, summary.failed, summary.lost), (1, 1, 0));
        let logs = logs.text();
        assert!(!logs.contains("lease lost"), "a lease given up by this worker reported lost:\n{logs}");
        assert_eq!(logs.matches("outcome stored").count(), 2, "the heartbeat says what happened:\n{logs}");
    }
}
