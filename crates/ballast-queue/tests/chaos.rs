//! Chaos: workers in child processes are killed (SIGKILL) again and again
//! while they drain keyed tasks (and, in a second run, tasks in sequences,
//! which must be applied in their order), and a worker is stopped (SIGSTOP)
//! for longer than its lease, then resumed; a worker that enqueues a
//! periodic task is killed while it runs a period's task, and the worker
//! after it runs that period and every later one, each applied once.
//!
//! The handler writes to a ledger that stands for the upstream: it applies
//! each key's effect once and counts every delivery. A trigger counts each
//! task's transitions to `completed`.
//!
//! The test binary re-executes itself: with `BALLAST_CHAOS_CHILD` set,
//! `chaos_child_worker` runs a worker against the given database until
//! killed; without it, that test does nothing.

mod support;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast::{Classification, Classify, IdempotencyKey};
use ballast_queue::{CatchUp, DurableBackoff, Handler, NewTask, Queue, Schedule, TaskContext, Worker};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use support::{pg_options, Db, Harness};
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "BALLAST_CHAOS_CHILD";
const SCHEMA_ENV: &str = "BALLAST_CHAOS_SCHEMA";
const OWNER_ENV: &str = "BALLAST_CHAOS_OWNER";
/// Set: the child's worker also enqueues [`PERIODIC`] every second.
const PERIODIC_ENV: &str = "BALLAST_CHAOS_PERIODIC";
/// The periodic task's name; its tasks are `ledger` tasks of payload
/// [`PERIODIC_N`] whose handler takes [`PERIODIC_HOLD`] before delivering.
const PERIODIC: &str = "tick";
const PERIODIC_N: i64 = -1;
const PERIODIC_HOLD: Duration = Duration::from_millis(500);
const READY: &str = "chaos child ready";
/// A child writes this whenever it takes a connection to ask the database
/// something; a claim has counted its lease from just before.
const ASKING: &str = "chaos child asks the database";
const LEASE: Duration = Duration::from_secs(1);
/// Tasks one claim takes (and handlers one worker runs at once).
const BATCH: usize = 8;

const TASKS: i64 = 1_000;
const KILLS: usize = 20;
/// The sequenced run: task `n` is in sequence `n % SEQUENCES`.
const SEQUENCED_TASKS: i64 = 400;
const SEQUENCES: i64 = 20;
const SEQUENCED_KILLS: usize = 10;
/// Child workers alive at once during the kills.
const CHILDREN: usize = 2;
const SEED: u64 = 20;

#[derive(Debug)]
struct LedgerError(String);

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Classify for LedgerError {
    fn classify(&self) -> Classification {
        Classification::transient()
    }
}

#[derive(Clone)]
enum Pool {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

/// Logs each handler start, then writes the task's effect to the ledger the
/// way an upstream honouring idempotency keys would: once per key, counting
/// every delivery.
#[derive(Clone)]
struct Ledger {
    pool: Pool,
    worker: String,
}

const START: &str = "INSERT INTO starts (worker, task, attempt) VALUES ($1, $2, $3)";
const DELIVER: &str = "INSERT INTO ledger (key, n, deliveries) VALUES ($1, $2, 1)
     ON CONFLICT (key) DO UPDATE SET deliveries = ledger.deliveries + 1";

impl Ledger {
    async fn log_start(&self, task: &TaskContext) -> sqlx::Result<()> {
        let (worker, id, attempt) = (&self.worker, task.id(), i64::from(task.attempt()));
        match &self.pool {
            Pool::Sqlite(pool) => {
                sqlx::query(START).bind(worker).bind(id).bind(attempt).execute(pool).await.map(drop)
            }
            Pool::Pg(pool) => {
                sqlx::query(START).bind(worker).bind(id).bind(attempt).execute(pool).await.map(drop)
            }
        }
    }

    async fn deliver(&self, key: &str, n: i64) -> sqlx::Result<()> {
        match &self.pool {
            Pool::Sqlite(pool) => sqlx::query(DELIVER).bind(key).bind(n).execute(pool).await.map(drop),
            Pool::Pg(pool) => sqlx::query(DELIVER).bind(key).bind(n).execute(pool).await.map(drop),
        }
    }
}

impl Handler for Ledger {
    type Payload = i64;
    type Error = LedgerError;

    async fn handle(&self, task: TaskContext, n: i64) -> Result<(), LedgerError> {
        let key = task.key().map(|k| k.as_str().to_owned()).unwrap_or_default();
        let unreachable = |e: sqlx::Error| LedgerError(format!("ledger unreachable: {e}"));
        self.log_start(&task).await.map_err(unreachable)?;
        let hold = if n == PERIODIC_N { PERIODIC_HOLD } else { Duration::from_millis(10) };
        tokio::time::sleep(hold).await;
        if task.cancellation().is_cancelled() {
            return Err(LedgerError("told to stop before delivering".into()));
        }
        self.deliver(&key, n).await.map_err(unreachable)?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

/// The ledger, the start log, a trigger recording every completion, and
/// one recording the order in which the upstream first applied each task.
async fn create_ledger(h: &Harness) {
    h.exec("CREATE TABLE ledger (key TEXT PRIMARY KEY, n BIGINT NOT NULL, deliveries BIGINT NOT NULL)").await;
    h.exec("CREATE TABLE starts (worker TEXT NOT NULL, task BIGINT NOT NULL, attempt BIGINT NOT NULL)").await;
    h.exec("CREATE TABLE completions (task BIGINT NOT NULL)").await;
    if h.is_pg() {
        h.exec("CREATE TABLE applied (position BIGSERIAL PRIMARY KEY, n BIGINT NOT NULL)").await;
        h.exec(
            "CREATE FUNCTION count_completion() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN INSERT INTO completions (task) VALUES (NEW.id); RETURN NULL; END $$;
             CREATE TRIGGER count_completions AFTER UPDATE OF state ON ballast_tasks
                 FOR EACH ROW WHEN (NEW.state = 'completed') EXECUTE FUNCTION count_completion();
             CREATE FUNCTION log_applied() RETURNS trigger LANGUAGE plpgsql AS
                 $$ BEGIN INSERT INTO applied (n) VALUES (NEW.n); RETURN NULL; END $$;
             CREATE TRIGGER log_applied AFTER INSERT ON ledger FOR EACH ROW EXECUTE FUNCTION log_applied()",
        )
        .await;
    } else {
        h.exec("CREATE TABLE applied (position INTEGER PRIMARY KEY AUTOINCREMENT, n BIGINT NOT NULL)").await;
        h.exec(
            "CREATE TRIGGER count_completions AFTER UPDATE OF state ON ballast_tasks
             WHEN NEW.state = 'completed' BEGIN INSERT INTO completions (task) VALUES (NEW.id); END",
        )
        .await;
        h.exec("CREATE TRIGGER log_applied AFTER INSERT ON ledger BEGIN INSERT INTO applied (n) VALUES (NEW.n); END")
            .await;
    }
}

/// `tasks` keyed tasks; with `sequences`, task `n` in sequence `n % sequences`.
async fn enqueue(h: &Harness, tasks: i64, sequences: Option<i64>) {
    let tasks = (0..tasks)
        .map(|i| {
            let task = NewTask::new("ledger", &i).key(IdempotencyKey::v5(i, "ledger"));
            match sequences {
                Some(m) => task.sequence(format!("entity/{}", i % m)),
                None => task,
            }
        })
        .collect();
    h.queue.enqueue_batch(tasks).await.unwrap();
}

/// Pairs of tasks of one sequence the upstream first applied out of their
/// order.
fn out_of_order(sequences: i64) -> String {
    format!(
        "SELECT count(*) FROM applied a JOIN applied b
         ON a.n % {sequences} = b.n % {sequences} AND a.n < b.n AND a.position > b.position"
    )
}

async fn connect(target: &str, schema: Option<&str>) -> (Queue, Pool) {
    match schema {
        None => {
            let options = SqliteConnectOptions::from_str(target)
                .unwrap()
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .after_connect(|_, _| {
                    Box::pin(async {
                        eprintln!("{ASKING}");
                        Ok(())
                    })
                })
                .before_acquire(|_, _| {
                    Box::pin(async {
                        eprintln!("{ASKING}");
                        Ok(true)
                    })
                })
                .connect_with(options)
                .await
                .unwrap();
            (Queue::from_sqlite(pool.clone()), Pool::Sqlite(pool))
        }
        Some(schema) => {
            let pool = PgPoolOptions::new()
                .max_connections(6)
                .connect_with(pg_options(target, schema).application_name(schema))
                .await
                .unwrap();
            (Queue::from_postgres(pool.clone()), Pool::Pg(pool))
        }
    }
}

fn worker(queue: Queue, pool: Pool, owner: &str) -> Worker {
    builder(queue, pool, owner).build().unwrap()
}

fn builder(queue: Queue, pool: Pool, owner: &str) -> ballast_queue::WorkerBuilder {
    Worker::builder(queue)
        .handler("ledger", Ledger { pool, worker: owner.to_owned() })
        .concurrency(BATCH)
        .batch(BATCH)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(50))
        .owner(owner)
}

/// A worker that also enqueues [`PERIODIC`] every second, catching up every
/// missed period, with 3 attempts 50 and 100 ms apart: waits short enough for
/// the worker to take a one-second period (no attempt here is meant to fail).
fn periodic_worker(queue: Queue, pool: Pool, owner: &str) -> Worker {
    let tick = queue
        .periodic("ledger", Schedule::every(Duration::from_secs(1)).unwrap())
        .name(PERIODIC)
        .payload(&PERIODIC_N)
        .catch_up(CatchUp::All)
        .max_attempts(3);
    builder(queue, pool, owner)
        .backoff(DurableBackoff::exponential(Duration::from_millis(25)))
        .periodic(tick)
        .build()
        .unwrap()
}

/// The worker half: only does something when the parent test started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_child_worker() {
    let Ok(target) = std::env::var(CHILD_ENV) else { return };
    let schema = std::env::var(SCHEMA_ENV).ok();
    let owner = std::env::var(OWNER_ENV).unwrap();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_ansi(false)
        .init();
    let (queue, pool) = connect(&target, schema.as_deref()).await;
    let worker = match std::env::var_os(PERIODIC_ENV) {
        Some(_) => periodic_worker(queue, pool, &owner),
        None => worker(queue, pool, &owner),
    };
    eprintln!("{READY}");
    worker.run(CancellationToken::new()).await;
}

/// Where the children find the database.
fn target(h: &Harness) -> (String, Option<String>) {
    match &h.db {
        Db::Sqlite { options, .. } => (format!("sqlite://{}", options.get_filename().display()), None),
        Db::Pg { url, schema, .. } => (url.clone(), Some(schema.clone())),
    }
}

/// A worker in a child process, killed when dropped (a stopped one too), with
/// the lines it wrote to stderr.
struct ChildWorker {
    child: Child,
    owner: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl ChildWorker {
    fn spawn(h: &Harness, owner: &str) -> Self {
        Self::spawn_with(h, owner, &[])
    }

    fn spawn_with(h: &Harness, owner: &str, env: &[(&str, &str)]) -> Self {
        let (target, schema) = target(h);
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "chaos_child_worker", "--nocapture"])
            .env(CHILD_ENV, target)
            .env(OWNER_ENV, owner)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(schema) = schema {
            cmd.env(SCHEMA_ENV, schema);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("re-exec the test binary as a worker");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self { child, owner: owner.to_owned(), log }
    }

    fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|line| line.contains(needle))
    }

    /// Whether a line with `then` came after one with `first`.
    fn logged_after(&self, first: &str, then: &str) -> bool {
        let log = self.log.lock().unwrap();
        let mut lines = log.iter().skip_while(|line| !line.contains(first));
        lines.next().is_some() && lines.any(|line| line.contains(then))
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    fn assert_alive(&mut self) {
        let exited = self.child.try_wait().unwrap();
        assert!(exited.is_none(), "worker {} exited on its own ({exited:?}):\n{}", self.owner, self.log());
    }

    /// Sends `signal` (STOP, CONT) with the `kill` command; after a STOP,
    /// returns once the kernel shows the process stopped: `kill` returns
    /// when the signal is sent, and a thread of a worker busy on a loaded
    /// machine could otherwise still take an answer in between.
    fn signal(&self, signal: &str) {
        let pid = self.child.id();
        let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
        if signal != "STOP" {
            return;
        }
        // Every thread's state (it follows the command's closing parenthesis).
        let states = || -> Vec<char> {
            let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
            threads
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
                .filter_map(|stat| stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()))
                .collect()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = states();
            if now.iter().all(|state| matches!(state, 'T' | 't')) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {} not stopped 10 s after SIGSTOP: {now:?}",
                self.owner
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls until `sql` returns `want`, for up to `within`.
async fn wait_until(h: &Harness, sql: &str, want: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = h.scalar(sql).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{sql}: {got}, not {want} after {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const COMPLETED: &str = "SELECT count(*) FROM ballast_tasks WHERE state = 'completed'";

/// What every run must end with: each task present, completed once, and its
/// key's effect applied once upstream. Returns the deliveries the upstream
/// absorbed as repeats of a key it had already applied.
async fn assert_each_task_done_once(h: &Harness, tasks: i64) -> i64 {
    let count = |sql: &'static str| h.scalar(sql);
    assert_eq!(count("SELECT count(*) FROM ballast_tasks").await, tasks, "no task lost");
    assert_eq!(count(COMPLETED).await, tasks, "every task completed");
    let running = count("SELECT count(*) FROM ballast_tasks WHERE state = 'running'").await;
    assert_eq!(running, 0, "no task left running (its lease would lapse with no one to finish it)");
    assert_eq!(count("SELECT count(*) FROM completions").await, tasks, "no task completed twice");
    let twice = "SELECT count(*) FROM (SELECT task FROM completions GROUP BY task HAVING count(*) > 1) AS t";
    assert_eq!(count(twice).await, 0, "no task completed twice");
    assert_eq!(count("SELECT count(*) FROM ledger").await, tasks, "one effect per key");
    let unknown = "SELECT count(*) FROM ledger WHERE key NOT IN (SELECT idempotency_key FROM ballast_tasks)";
    assert_eq!(count(unknown).await, 0, "no effect for a key no task has");
    let missing = "SELECT count(*) FROM ballast_tasks WHERE idempotency_key NOT IN (SELECT key FROM ledger)";
    assert_eq!(count(missing).await, 0, "every task's key has its effect");
    count("SELECT CAST(COALESCE(sum(deliveries), 0) AS BIGINT) FROM ledger").await - tasks
}

/// Children drain the tasks while the oldest is SIGKILLed after every few
/// completions, at a seeded random point; survivors rescue the orphaned
/// leases and finish.
async fn kill_workers_while_draining(h: Harness) {
    kill_workers_while(h, TASKS, KILLS, None).await;
}

/// The same with the tasks in [`SEQUENCES`] sequences: besides nothing
/// lost and nothing twice, the upstream applies each sequence's tasks in
/// the order they were enqueued, however often the worker delivering one
/// is killed.
async fn kill_workers_while_draining_sequences(h: Harness) {
    kill_workers_while(h, SEQUENCED_TASKS, SEQUENCED_KILLS, Some(SEQUENCES)).await;
}

async fn kill_workers_while(h: Harness, tasks: i64, kills_wanted: usize, sequences: Option<i64>) {
    let backend = if h.is_pg() { "postgres" } else { "sqlite" };
    let began = Instant::now();
    create_ledger(&h).await;
    enqueue(&h, tasks, sequences).await;
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut spawned = 0;
    let mut spawn = |h: &Harness| {
        spawned += 1;
        ChildWorker::spawn(h, &format!("chaos-{spawned}"))
    };
    let mut children: VecDeque<ChildWorker> = (0..CHILDREN).map(|_| spawn(&h)).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut kills, mut orphaned) = (0, 0);
    let mut last = h.scalar(COMPLETED).await;
    while kills < kills_wanted {
        let step = rng.random_range(10..20);
        while h.scalar(COMPLETED).await < last + step {
            assert!(Instant::now() < deadline, "workers stopped making progress after {kills} kills");
            children.iter_mut().for_each(ChildWorker::assert_alive);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
        let mut victim = children.pop_front().unwrap();
        let held = format!(
            "SELECT count(*) FROM ballast_tasks WHERE state = 'running' AND lease_owner = '{}'",
            victim.owner
        );
        orphaned += h.scalar(&held).await;
        victim.kill();
        kills += 1;
        last = h.scalar(COMPLETED).await;
        assert!(last < tasks, "kill {kills} came after the queue was drained");
        children.push_back(spawn(&h));
    }
    wait_until(&h, COMPLETED, tasks, Duration::from_secs(120)).await;
    children.iter_mut().for_each(ChildWorker::kill);

    let repeated = assert_each_task_done_once(&h, tasks).await;
    if let Some(m) = sequences {
        assert_eq!(h.scalar(&out_of_order(m)).await, 0, "each sequence applied in the order it was enqueued");
    }
    let rescued = h.scalar("SELECT count(*) FROM ballast_tasks WHERE attempt > 1").await;
    let starts = h.scalar("SELECT count(*) FROM starts").await;
    eprintln!(
        "chaos figures ({backend}{}): tasks={tasks} kills={kills} children={spawned} \
         tasks_running_in_killed_workers={orphaned} tasks_with_attempt>1={rescued} handler_starts={starts} \
         repeated_deliveries_absorbed_by_key={repeated} duplicate_effects=0 elapsed={:.1?}",
        sequences.map_or(String::new(), |m| format!(", {m} sequences in order")),
        began.elapsed()
    );
    h.cleanup().await;
}

/// A worker is stopped while its claim is in flight, for longer than the
/// lease, then resumed: the moment a stop can turn into stale handler starts
/// (a handler already running when the stop came is told to stop through
/// its cancellation token instead, and covered by the key).
///
/// On PostgreSQL the database holds the claim (a trigger waits on a lock the
/// test holds), commits it while the worker is stopped, and another worker
/// completes those tasks once their leases run out. On SQLite the claim runs
/// inside the stopped process: it waits on the write lock the test holds, and
/// commits after the resume with a lease counted from before the stop,
/// already run out.
async fn stop_a_worker_past_its_lease(h: Harness) {
    let backend = if h.is_pg() { "postgres" } else { "sqlite" };
    let tasks = BATCH as i64;
    create_ledger(&h).await;
    let claimed = "SELECT count(*) FROM ballast_tasks WHERE attempt >= 1";
    let other = worker(h.other_queue().await, pool(&h), "other");
    let stop_other = CancellationToken::new();
    let (mut stopped, other) = match &h.db {
        Db::Pg { pool, schema, .. } => {
            h.exec(
                "CREATE FUNCTION hold_claim() RETURNS trigger LANGUAGE plpgsql AS
                     $$ BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(TG_TABLE_SCHEMA)); RETURN NEW; END $$;
                 CREATE TRIGGER hold_claims BEFORE UPDATE ON ballast_tasks FOR EACH ROW
                     WHEN (NEW.lease_owner = 'stopped' AND OLD.state = 'pending') EXECUTE FUNCTION hold_claim()",
            )
            .await;
            let mut hold = pool.begin().await.unwrap();
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext(current_schema()))")
                .execute(&mut *hold)
                .await
                .unwrap();
            enqueue(&h, tasks, None).await;
            let stopped = spawn_ready(&h, "stopped").await;
            let waiting = format!(
                "SELECT LEAST(count(*), 1) FROM pg_stat_activity
                 WHERE application_name = '{schema}' AND wait_event_type = 'Lock'"
            );
            wait_until(&h, &waiting, 1, Duration::from_secs(30)).await;
            stopped.signal("STOP");
            hold.rollback().await.unwrap();
            wait_until(&h, claimed, tasks, Duration::from_secs(30)).await;
            let run_out =
                "SELECT count(*) FROM ballast_tasks WHERE state = 'running' AND lease_expires_at <= now()";
            wait_until(&h, run_out, tasks, Duration::from_secs(30)).await;
            let other = tokio::spawn(other.run(stop_other.clone()));
            wait_until(&h, COMPLETED, tasks, Duration::from_secs(30)).await;
            stopped.signal("CONT");
            (stopped, other)
        }
        Db::Sqlite { .. } => {
            enqueue(&h, tasks, None).await;
            let lock = h.lock_writes().await;
            let stopped = spawn_ready(&h, "stopped").await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while !stopped.logged_after(READY, ASKING) {
                assert!(Instant::now() < deadline, "the worker never asked for a claim:\n{}", stopped.log());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            stopped.signal("STOP");
            tokio::time::sleep(LEASE * 2).await;
            stopped.signal("CONT");
            lock.release().await;
            wait_until(&h, claimed, tasks, Duration::from_secs(30)).await;
            (stopped, tokio::spawn(other.run(stop_other.clone())))
        }
    };
    let stale = "SELECT count(*) FROM starts WHERE attempt = 1";
    let deadline = Instant::now() + Duration::from_secs(30);
    while !stopped.logged("not starting") && h.scalar(stale).await == 0 {
        assert!(Instant::now() < deadline, "the resumed worker did nothing visible:\n{}", stopped.log());
        stopped.assert_alive();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_until(&h, COMPLETED, tasks, Duration::from_secs(30)).await;
    stop_other.cancel();
    other.await.unwrap();
    stopped.kill();

    let stale = h.scalar(stale).await;
    assert_eq!(
        stale,
        0,
        "{backend}: the resumed worker started {stale} handlers under the claim whose lease ran out while it \
         was stopped:\n{}",
        stopped.log()
    );
    let resumed_starts = h.scalar("SELECT count(*) FROM starts WHERE worker = 'stopped'").await;
    if h.is_pg() {
        assert_eq!(resumed_starts, 0, "every task was completed by the other worker before the resume");
    }
    let repeated = assert_each_task_done_once(&h, tasks).await;
    eprintln!(
        "stop figures ({backend}): tasks={tasks} starts_by_resumed_worker={resumed_starts} \
         repeated_deliveries_absorbed_by_key={repeated}"
    );
    h.cleanup().await;
}

/// The worker that enqueues a periodic task is killed in the middle of a
/// period's task, before it delivered; a new worker starts: the killed
/// period's task is taken over once its lease runs out and completed, every
/// period from the first on has its task (none lost over the kill), and each
/// period's effect is applied once.
async fn kill_the_worker_that_enqueued_a_period(h: Harness) {
    let backend = if h.is_pg() { "postgres" } else { "sqlite" };
    create_ledger(&h).await;
    let periodic = [(PERIODIC_ENV, "1")];
    let mut first = ChildWorker::spawn_with(&h, "periodic-1", &periodic);
    let started = "SELECT count(*) FROM starts WHERE worker = 'periodic-1'";
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.scalar(started).await < 2 {
        assert!(Instant::now() < deadline, "the first worker ran no second period:\n{}", first.log());
        first.assert_alive();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Within the handler's hold: the period's task is running, undelivered.
    first.kill();
    let undelivered = "SELECT COALESCE(max(s.task), 0) FROM starts s JOIN ballast_tasks t ON t.id = s.task
         WHERE s.worker = 'periodic-1' AND t.idempotency_key NOT IN (SELECT key FROM ledger)";
    let killed = h.scalar(undelivered).await;
    assert!(killed > 0, "{backend}: killed within a handler's hold, before it delivered:\n{}", first.log());

    let mut second = ChildWorker::spawn_with(&h, "periodic-2", &periodic);
    let done = format!("SELECT count(*) FROM ballast_tasks WHERE id = {killed} AND state = 'completed'");
    wait_until(&h, &done, 1, Duration::from_secs(30)).await;
    let completed = "SELECT count(*) FROM ballast_tasks WHERE state = 'completed'";
    let after_kill = h.scalar(completed).await;
    let three_more = format!(
        "SELECT CASE WHEN ({completed}) >= {} THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END",
        after_kill + 3
    );
    wait_until(&h, &three_more, 1, Duration::from_secs(30)).await;
    second.assert_alive();
    second.kill();

    let rescued =
        h.scalar(&format!("SELECT CAST(attempt AS BIGINT) FROM ballast_tasks WHERE id = {killed}")).await;
    assert!(
        rescued >= 2,
        "{backend}: the killed period's task ran again after its lease ran out ({rescued})"
    );
    let by_second = format!("SELECT count(*) FROM starts WHERE worker = 'periodic-2' AND task = {killed}");
    assert!(h.scalar(&by_second).await >= 1, "{backend}: the next worker took the killed period over");
    // Every period from the first to the last has its task: seconds in a row.
    let periods = h.scalar("SELECT count(*) FROM ballast_tasks").await;
    let span = "SELECT max(CAST(substr(idempotency_key, 15) AS BIGINT)) - min(CAST(substr(idempotency_key, 15) AS BIGINT)) + 1 FROM ballast_tasks";
    assert_eq!(h.scalar(span).await, periods, "{backend}: a period went missing over the kill");
    let not_periodic = "SELECT count(*) FROM ballast_tasks WHERE idempotency_key NOT LIKE 'periodic:tick:%'";
    assert_eq!(h.scalar(not_periodic).await, 0);
    // Each completed period's effect applied, and none for a key no task has.
    let applied = "SELECT count(*) FROM ledger WHERE key IN (SELECT idempotency_key FROM ballast_tasks WHERE state = 'completed')";
    assert_eq!(
        h.scalar(applied).await,
        h.scalar(completed).await,
        "{backend}: each completed period applied"
    );
    let unknown = "SELECT count(*) FROM ledger
        WHERE key NOT IN (SELECT idempotency_key FROM ballast_tasks WHERE idempotency_key IS NOT NULL)";
    assert_eq!(h.scalar(unknown).await, 0);
    // A delivery repeated (a lease lost on a loaded machine) is absorbed by
    // the key, as in the other scenarios: counted, not refused.
    let repeated = h.scalar("SELECT CAST(COALESCE(sum(deliveries - 1), 0) AS BIGINT) FROM ledger").await;
    eprintln!(
        "periodic kill figures ({backend}): periods={periods} killed_task={killed} attempt_after_rescue={rescued} \
         repeated_deliveries_absorbed_by_key={repeated}"
    );
    h.cleanup().await;
}

/// Spawns a child worker and waits until it is about to run.
async fn spawn_ready(h: &Harness, owner: &str) -> ChildWorker {
    let mut child = ChildWorker::spawn(h, owner);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !child.logged(READY) {
        assert!(Instant::now() < deadline, "worker {owner} never started:\n{}", child.log());
        child.assert_alive();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child
}

fn pool(h: &Harness) -> Pool {
    match &h.db {
        Db::Sqlite { pool, .. } => Pool::Sqlite(pool.clone()),
        Db::Pg { pool, .. } => Pool::Pg(pool.clone()),
    }
}

/// Each scenario as two tests: on SQLite, and on PostgreSQL when
/// `BALLAST_TEST_PG` names one (skipped, saying so, otherwise). A child
/// worker process runs only `chaos_child_worker` (`--exact`), never these.
macro_rules! on_both_backends {
    ($($scenario:ident: $sqlite:ident, $postgres:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $scenario(Harness::sqlite().await).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            if let Some(h) = Harness::postgres().await {
                $scenario(h).await;
            }
        }
    )*};
}

on_both_backends! {
    kill_workers_while_draining:
        sqlite_workers_killed_while_draining_lose_and_duplicate_nothing,
        postgres_workers_killed_while_draining_lose_and_duplicate_nothing;
    kill_workers_while_draining_sequences:
        sqlite_workers_killed_while_draining_sequences_keep_their_order,
        postgres_workers_killed_while_draining_sequences_keep_their_order;
    stop_a_worker_past_its_lease:
        sqlite_worker_stopped_past_its_lease_starts_no_stale_handler,
        postgres_worker_stopped_past_its_lease_starts_no_stale_handler;
    kill_the_worker_that_enqueued_a_period:
        sqlite_periodic_worker_killed_mid_period_loses_and_repeats_no_period,
        postgres_periodic_worker_killed_mid_period_loses_and_repeats_no_period;
}
