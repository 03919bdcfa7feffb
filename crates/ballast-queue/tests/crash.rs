//! Crash test: a worker in a child process is SIGKILLed mid-batch again and
//! again; a fresh worker finishes. Every task must end completed exactly once,
//! the side-effect ledger must hold exactly one effect per key, and no task
//! may be lost.
//!
//! The test binary re-executes itself: with `BALLAST_CRASH_CHILD` set,
//! `crash_child_worker` runs a worker against the given database until killed;
//! without it, that test does nothing.

mod support;

use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use ballast::{Classification, Classify, IdempotencyKey};
use ballast_queue::{Handler, NewTask, Queue, TaskContext, Worker};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use support::{pg_options, Db, Harness};
use tokio_util::sync::CancellationToken;

const CHILD_ENV: &str = "BALLAST_CRASH_CHILD";
const SCHEMA_ENV: &str = "BALLAST_CRASH_SCHEMA";
const TASKS: i64 = 400;
const KILLS: usize = 5;
const LEASE: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("unreachable")
    }
}

impl Classify for Never {
    fn classify(&self) -> Classification {
        Classification::permanent()
    }
}

/// Writes the task's effect to the ledger, deduplicated by idempotency key as
/// an external system would, and counts every attempt to do so.
#[derive(Clone)]
enum Ledger {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

impl Handler for Ledger {
    type Payload = i64;
    type Error = Never;

    async fn handle(&self, task: TaskContext, _: i64) -> Result<(), Never> {
        let key = task.key().map(|k| k.as_str().to_owned()).unwrap_or_default();
        let attempt = "INSERT INTO ledger_attempts (key) VALUES ($1)";
        let effect = "INSERT INTO ledger (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
        // Errors here would be the database going away with the process: the
        // handler then never returns Ok, and the task runs again elsewhere.
        match self {
            Ledger::Sqlite(pool) => {
                let _ = sqlx::query(attempt).bind(&key).execute(pool).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = sqlx::query(effect).bind(&key).execute(pool).await;
            }
            Ledger::Pg(pool) => {
                let _ = sqlx::query(attempt).bind(&key).execute(pool).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let _ = sqlx::query(effect).bind(&key).execute(pool).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    }
}

async fn connect(target: &str, schema: Option<&str>) -> (Queue, Ledger) {
    match schema {
        None => {
            let options = SqliteConnectOptions::from_str(target)
                .unwrap()
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options).await.unwrap();
            (Queue::from_sqlite(pool.clone()), Ledger::Sqlite(pool))
        }
        Some(schema) => {
            let pool = PgPoolOptions::new()
                .max_connections(6)
                .connect_with(pg_options(target, schema))
                .await
                .unwrap();
            (Queue::from_postgres(pool.clone()), Ledger::Pg(pool))
        }
    }
}

fn worker(queue: Queue, ledger: Ledger) -> Worker {
    Worker::builder(queue)
        .handler("ledger", ledger)
        .concurrency(8)
        .batch(8)
        .lease(LEASE)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
}

/// The worker half: only does something when the parent test started it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child_worker() {
    let Ok(target) = std::env::var(CHILD_ENV) else { return };
    let schema = std::env::var(SCHEMA_ENV).ok();
    let (queue, ledger) = connect(&target, schema.as_deref()).await;
    worker(queue, ledger).run(CancellationToken::new()).await;
}

fn spawn_child(target: &str, schema: Option<&str>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "crash_child_worker", "--nocapture"])
        .env(CHILD_ENV, target)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(schema) = schema {
        cmd.env(SCHEMA_ENV, schema);
    }
    cmd.spawn().expect("re-exec the test binary as a worker")
}

async fn crash_and_recover(h: Harness) {
    h.exec("CREATE TABLE ledger (key TEXT PRIMARY KEY)").await;
    h.exec("CREATE TABLE ledger_attempts (key TEXT NOT NULL)").await;
    let tasks = (0..TASKS).map(|i| NewTask::new("ledger", &i).key(IdempotencyKey::v5(i, "ledger"))).collect();
    h.queue.enqueue_batch(tasks).await.unwrap();

    let (target, schema) = match &h.db {
        Db::Sqlite { options, .. } => (format!("sqlite://{}", options.get_filename().display()), None),
        Db::Pg { url, schema, .. } => (url.clone(), Some(schema.clone())),
    };
    let effects = "SELECT count(*) FROM ledger";
    let mut kills = 0;
    for _ in 0..KILLS {
        let before = h.scalar(effects).await;
        let mut child = spawn_child(&target, schema.as_deref());
        // Kill once the child is mid-batch: some effects written, more in flight.
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.scalar(effects).await < before + 20 {
            assert!(Instant::now() < deadline, "child worker made no progress");
            assert!(child.try_wait().unwrap().is_none(), "child worker exited on its own");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        kills += 1;
    }
    let running = h.scalar("SELECT count(*) FROM ballast_tasks WHERE state = 'running'").await;

    // A fresh worker rescues the orphaned leases once they expire and finishes.
    let (queue, ledger) = connect(&target, schema.as_deref()).await;
    let stop = CancellationToken::new();
    let fresh = tokio::spawn(worker(queue, ledger).run(stop.clone()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while h.scalar("SELECT count(*) FROM ballast_tasks WHERE state = 'completed'").await < TASKS {
        assert!(Instant::now() < deadline, "the fresh worker did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    fresh.await.unwrap();

    let count = |sql: &'static str| h.scalar(sql);
    assert_eq!(count("SELECT count(*) FROM ballast_tasks").await, TASKS, "no task lost");
    assert_eq!(count("SELECT count(*) FROM ballast_tasks WHERE state = 'completed'").await, TASKS);
    assert_eq!(count("SELECT count(*) FROM ballast_tasks WHERE finalized_at IS NULL").await, 0);
    assert_eq!(count("SELECT count(*) FROM ledger").await, TASKS, "exactly one effect per key");
    let unknown = "SELECT count(*) FROM ledger WHERE key NOT IN (SELECT idempotency_key FROM ballast_tasks)";
    assert_eq!(count(unknown).await, 0);
    let attempts = count("SELECT count(*) FROM ledger_attempts").await;
    let rerun = count(
        "SELECT count(*) FROM (SELECT key FROM ledger_attempts GROUP BY key HAVING count(*) > 1) AS twice",
    )
    .await;
    let rescued = count("SELECT count(*) FROM ballast_tasks WHERE attempt > 1").await;
    eprintln!(
        "crash figures ({}): kills={kills} tasks={TASKS} running_at_last_kill={running} \
         handler_runs={attempts} keys_handled_more_than_once={rerun} tasks_with_attempt>1={rescued} \
         duplicate_effects={}",
        if schema.is_some() { "postgres" } else { "sqlite" },
        count("SELECT count(*) FROM ledger").await - TASKS,
    );
    assert_eq!(kills, KILLS);
    h.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_worker_killed_mid_batch_loses_and_duplicates_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    crash_and_recover(Harness::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_worker_killed_mid_batch_loses_and_duplicates_nothing() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let Some(h) = Harness::postgres().await else { return };
    crash_and_recover(h).await;
}
