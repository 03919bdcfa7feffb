//! The worker, in River's three parts: the [`producer`] claims due tasks
//! and holds their leases, the [`executor`] runs their handlers under the
//! leases' cancellation, and the [`completer`] writes every outcome in
//! batches, each with the next claim. This module builds a worker and runs
//! the loop that joins them. It speaks to the database only through the
//! store interface.

mod completer;
mod executor;
mod producer;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::alert::{Alert, LogAlert};
use crate::error::{Error, Result};
use crate::handler::{Erased, ErasedHandler, Handler};
use crate::lease::Held;
use crate::metrics::AttemptCounters;
use crate::outcome::Outcome;
use crate::store::{ClaimRequest, Exchange, Store};
use crate::DurableBackoff;
use crate::Queue;

use completer::{Batch, Completer, Report, Settling};
use executor::{Attempts, Executor, Finished};
use producer::Producer;

use crate::{DEFAULT_BATCH, DEFAULT_CONCURRENCY, DEFAULT_LEASE, MIN_LEASE};

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
#[derive(derive_setters::Setters)]
#[setters(generate = false)]
pub struct WorkerBuilder {
    queue: Queue,
    handlers: HashMap<String, Arc<dyn ErasedHandler>>,
    duplicate: Option<String>,
    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`], 200). With
    /// room for several batches the worker keeps up to 4 round trips in
    /// flight, so one worker per process is enough.
    #[setters(generate)]
    concurrency: usize,
    /// Tasks claimed per round trip at most (default [`DEFAULT_BATCH`], 50;
    /// never more than the concurrency).
    #[setters(generate)]
    batch: usize,
    /// How often to look for due tasks when nothing wakes the worker
    /// (default: the queue's [`DurableSchedule`](crate::DurableSchedule), 5 s
    /// unless set; on PostgreSQL new tasks wake it through LISTEN/NOTIFY).
    #[setters(generate)]
    poll_interval: Duration,
    /// How long a claim holds a task without a heartbeat (default 30 s). The
    /// worker renews it every third of that while the handler runs; if the
    /// worker dies, the task is claimable again once the lease runs out. A
    /// handler whose lease could not be renewed in time is told to stop (see
    /// [`Worker`]).
    #[setters(generate)]
    lease: Duration,
    /// On shutdown, how long in-flight handlers may run before they are
    /// stopped and their tasks released (default 30 s).
    #[setters(generate, rename = "shutdown_grace")]
    grace: Duration,
    /// Delay between attempts after a transient error (default: the queue's
    /// [`DurableSchedule`](crate::DurableSchedule), 2^n s ≤ 1 h unless set).
    #[setters(generate)]
    backoff: DurableBackoff,
    alert: Arc<dyn Alert>,
    /// Names the worker in `lease_owner` (default: host, process id, random suffix).
    #[setters(generate, strip_option, into)]
    owner: Option<String>,
    /// Seeds the backoff jitter, for reproducible tests.
    #[setters(generate, strip_option)]
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
    #[must_use]
    pub fn handler<H: Handler>(mut self, kind: impl Into<String>, handler: H) -> Self {
        let kind = kind.into();
        let erased: Arc<dyn ErasedHandler> = Arc::new(Erased(Arc::new(handler)));
        if self.handlers.insert(kind.clone(), erased).is_some() {
            self.duplicate = Some(kind);
        }
        self
    }

    /// Told about every task that fails for good (default: [`LogAlert`]).
    #[must_use]
    pub fn alert(mut self, alert: impl Alert) -> Self {
        self.alert = Arc::new(alert);
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
        // An alert whose tasks no handler runs would page nobody, silently:
        // its tasks would wait forever. Asked with a failure of a kind no
        // alert keeps to itself.
        let probe = crate::alert::FailedTask::probe();
        let unhandled =
            |kind: &&str| crate::task::check_kind(kind).is_ok() && !self.handlers.contains_key(*kind);
        if let Some(kind) = self.alert.enqueue(&probe).iter().map(|t| t.kind()).find(unhandled) {
            return Err(Error::Config(format!(
                "the alert enqueues tasks of kind {kind:?}, which this worker has no handler for: they would \
                 wait forever and nobody would be told of a failure (R-RES-RE-5); register its handler with \
                 .handler({kind:?}, ..) on this worker"
            )));
        }
        if self.concurrency == 0 || self.batch == 0 {
            return Err(Error::Config("concurrency and batch must be at least 1".into()));
        }
        if self.lease < MIN_LEASE || self.poll_interval.is_zero() {
            return Err(Error::Config(format!(
                "lease must be at least {MIN_LEASE:?} ({DEFAULT_LEASE:?} is typical) and poll_interval above zero"
            )));
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
            counters: kinds.iter().map(|kind| (kind.clone(), AttemptCounters::register(kind))).collect(),
            attempts: Attempts {
                handlers: self.handlers,
                alert: self.alert,
                backoff: self.backoff,
                rng: Mutex::new(rng),
                max_attempts: self.queue.schedule.max_attempts,
                held: Held::default(),
            },
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
        let Worker { queue, claim, concurrency, batch, pipeline, poll_interval, grace, attempts, counters } =
            self;
        let held = attempts.held.clone();
        let producer = Producer::start(&queue.store, claim, concurrency, batch, held.clone(), counters).await;
        let mut run = Run {
            completer: Completer::new(Arc::clone(&attempts.alert)),
            executor: Executor::new(attempts),
            producer,
            held,
            queue,
            trips: JoinSet::new(),
            asking: 0,
            batch,
            pipeline,
            poll_interval,
            linger_until: None,
            retry_at: None,
            quiet: crate::quiet::Quiet::default(),
        };
        run.until(&shutdown).await;
        run.finish(grace).await
    }
}

/// A round trip's answer, with what it was sent.
struct Answer {
    batch: Batch,
    want: usize,
    asked: Instant,
    result: Result<Exchange>,
}

/// What wakes the loop.
enum Event {
    Stop,
    Finished((crate::store::Lease, Finished)),
    Answered(Answer),
    Tick,
    Woken,
    Backed,
}

/// One run of a worker: the three parts and the round trips between them
/// and the database.
struct Run {
    producer: Producer,
    executor: Executor,
    completer: Completer,
    held: Held,
    queue: Queue,
    /// Round trips in flight; `asking` tasks are asked for by them, and
    /// count against the concurrency as if they were running already.
    trips: JoinSet<Answer>,
    asking: usize,
    batch: usize,
    pipeline: usize,
    poll_interval: Duration,
    /// Until when the next round trip may wait for the handlers still running.
    linger_until: Option<Instant>,
    /// After a database error: no round trip before then.
    retry_at: Option<Instant>,
    /// Repeated errors, logged once an interval.
    quiet: crate::quiet::Quiet,
}

impl Run {
    async fn until(&mut self, shutdown: &CancellationToken) {
        let mut poll = tokio::time::interval_at(Instant::now() + self.poll_interval, self.poll_interval);
        poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            while let Some(finished) = self.executor.try_next() {
                self.finished(finished);
            }
            while let Some(answer) = self.trips.try_join_next() {
                self.answered(answer.expect("a round trip does not panic"));
            }
            let want = self.producer.want(self.asking);
            let backing_off = self.retry_at.is_some_and(|at| Instant::now() < at);
            let ready = (want > 0 || !self.completer.is_empty()) && self.trips.len() < self.pipeline;
            if ready && !backing_off {
                self.retry_at = None;
                // One round trip settles and claims a whole batch: while
                // handlers are still running and neither side of it is full,
                // wait for them, at most LINGER.
                let full = self.producer.in_flight(self.asking) == 0
                    || self.producer.full(want)
                    || self.completer.len() >= self.batch;
                let deadline = *self.linger_until.get_or_insert_with(|| Instant::now() + LINGER);
                if !full && Instant::now() < deadline {
                    let event = tokio::select! {
                        _ = shutdown.cancelled() => Event::Stop,
                        Some(finished) = self.executor.next() => Event::Finished(finished),
                        Some(answer) = self.trips.join_next() => Event::Answered(answer.expect("a round trip does not panic")),
                        _ = tokio::time::sleep_until(deadline) => Event::Backed,
                    };
                    self.handle(event);
                    continue;
                }
                self.linger_until = None;
                self.ask(want);
                continue;
            }
            let retry_at = self.retry_at.unwrap_or_else(Instant::now);
            let event = tokio::select! {
                _ = shutdown.cancelled() => Event::Stop,
                Some(finished) = self.executor.next() => Event::Finished(finished),
                Some(answer) = self.trips.join_next() => Event::Answered(answer.expect("a round trip does not panic")),
                _ = tokio::time::sleep_until(retry_at), if backing_off => Event::Backed,
                _ = poll.tick() => Event::Tick,
                _ = self.queue.wake.notified() => Event::Woken,
                _ = self.producer.notified() => Event::Woken,
            };
            self.handle(event);
        }
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Finished(finished) => self.finished(finished),
            Event::Answered(answer) => self.answered(answer),
            Event::Tick | Event::Woken => self.producer.wake(),
            Event::Stop | Event::Backed => {}
        }
    }

    /// An attempt came back: its outcome waits for the next round trip.
    fn finished(&mut self, (lease, finished): (crate::store::Lease, Finished)) {
        if let Finished::Ran(settling) = finished {
            self.held.remove(lease);
            self.completer.push(settling);
        }
    }

    /// Sends the outcomes waiting and a claim for up to `want` tasks as one
    /// round trip, beside this loop; [`answered`](Self::answered) takes its answer.
    fn ask(&mut self, want: usize) {
        self.asking += want;
        let claim = self.producer.request(want);
        let store = self.queue.store.clone();
        let batch = self.completer.take();
        self.trips.spawn(async move {
            let asked = Instant::now();
            let result = store.settle_and_claim(batch.outcomes(), &claim).await;
            Answer { batch, want, asked, result }
        });
    }

    /// Accounts for the outcomes of an answered round trip and starts the
    /// handlers of the tasks it claimed. On a database error the outcomes
    /// are kept for the next try, which waits a moment.
    fn answered(&mut self, answer: Answer) {
        self.asking -= answer.want;
        match answer.result {
            Err(e) => {
                let error = e.to_string();
                if let Some(held_back) = self.quiet.let_through(&error) {
                    tracing::error!(
                        %error,
                        held_back,
                        "settling and claiming tasks failed; retrying every second (the same error is logged once in {:?}, with how many were held back)",
                        crate::quiet::QUIET_FOR
                    );
                }
                self.completer.put_back(answer.batch);
                self.producer.failed();
                self.retry_at = Some(Instant::now() + self.poll_interval.min(Duration::from_secs(1)));
            }
            Ok(exchange) => {
                self.completer.settled(answer.batch, &exchange.refused);
                for cleared in self.producer.claimed(answer.want, answer.asked, exchange.claimed) {
                    self.executor.start(cleared.task, cleared.cancel, cleared.counters);
                }
            }
        }
    }

    /// Lets the claims already sent come back (their tasks run, or are
    /// released, like the others), gives the handlers `grace`, then stops
    /// the rest and releases their tasks with the last outcomes.
    async fn finish(mut self, grace: Duration) -> RunSummary {
        while let Some(answer) = self.trips.join_next().await {
            self.answered(answer.expect("a round trip does not panic"));
        }
        let deadline = Instant::now() + grace;
        while self.held.len() > 0 {
            let event = tokio::select! {
                Some(finished) = self.executor.next() => Event::Finished(finished),
                _ = tokio::time::sleep_until(deadline) => break,
            };
            self.handle(event);
        }
        self.held.cancel_all();
        self.executor.abort().await;
        while let Some(finished) = self.executor.try_next() {
            self.finished(finished);
        }
        for (lease, counters) in self.held.drain() {
            self.completer.push(Settling {
                outcome: Outcome::Released { lease },
                counters,
                report: Report::Released,
            });
        }
        if !self.completer.is_empty() {
            let claim = self.producer.request(0);
            let batch = self.completer.take();
            match self.queue.store.settle_and_claim(batch.outcomes(), &claim).await {
                Ok(exchange) => self.completer.settled(batch, &exchange.refused),
                Err(e) => tracing::warn!(
                    error = %e,
                    outcomes = batch.outcomes().len(),
                    "could not write the last outcomes at shutdown; their leases expire on their own and the tasks run again"
                ),
            }
        }
        self.producer.stop().await;
        self.completer.summary()
    }
}
#[cfg(test)]
mod tests {
    use std::io::Write;

    use ballast::{Classification, Classified};
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;
    use crate::lease;
    use crate::{NewTask, TaskContext};
    use producer::Cleared;

    /// Fails every attempt, transiently or for good.
    struct Failing(Classification);

    impl Handler for Failing {
        type Payload = u64;
        type Error = Classified;

        async fn handle(&self, _: TaskContext, _: u64) -> std::result::Result<(), Classified> {
            Err(Classified::new("declined", self.0))
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

    /// C3: an alert whose tasks no handler of the worker runs would page
    /// nobody; the worker is refused when it is built.
    #[tokio::test]
    async fn an_alert_whose_tasks_no_handler_runs_is_refused() {
        struct Pager;
        impl Alert for Pager {
            fn task_failed(&self, _: &crate::FailedTask) {}
            fn enqueue(&self, failed: &crate::FailedTask) -> Vec<NewTask> {
                vec![NewTask::new("page", &failed.id).key(failed.failure_key("page"))]
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let queue =
            Queue::connect(&format!("sqlite://{}", dir.path().join("queue.db").display())).await.unwrap();
        let builder =
            || Worker::builder(queue.clone()).handler("k", Failing(Classification::permanent())).alert(Pager);
        let refused = builder().build().unwrap_err().to_string();
        assert!(refused.contains("\"page\"") && refused.contains("R-RES-RE-5"), "{refused}");
        assert!(builder().handler("page", Failing(Classification::permanent())).build().is_ok());
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
            (worker.poll_interval, worker.attempts.backoff, worker.attempts.max_attempts),
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
        let store = worker.queue.store.clone();
        let held = worker.attempts.held.clone();
        let mut producer = Producer::start(
            &store,
            worker.claim.clone(),
            worker.concurrency,
            worker.batch,
            held.clone(),
            worker.counters.clone(),
        )
        .await;
        let claim = producer.request(2);
        let asked = Instant::now();
        let claimed = store.settle_and_claim(&[], &claim).await.unwrap().claimed;
        let cleared = producer.claimed(2, asked, claimed);
        assert_eq!(cleared.len(), 2);

        let round = held.leases();
        let mut completer = Completer::new(Arc::clone(&worker.attempts.alert));
        for Cleared { task, cancel, counters } in cleared {
            let lease = task.lease;
            let Finished::Ran(settling) = worker.attempts.attempt(task, cancel, counters).await else {
                panic!("the handler ran")
            };
            held.remove(lease);
            completer.push(settling);
        }
        let batch = completer.take();
        let exchange = store.settle_and_claim(batch.outcomes(), &producer.request(0)).await.unwrap();
        completer.settled(batch, &exchange.refused);
        lease::renew(&store, &held, &round, worker.claim.lease).await;
        producer.stop().await;

        let summary = completer.summary();
        assert_eq!((summary.rescheduled, summary.failed, summary.lost), (1, 1, 0));
        let logs = logs.text();
        assert!(!logs.contains("lease lost"), "a lease given up by this worker reported lost:\n{logs}");
    }
}
