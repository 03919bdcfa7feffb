//! Throughput and latency of the durable queue (`ballast-queue`) on SQLite and
//! PostgreSQL, beside the bare SQL claim/complete loop on the same database.
//!
//! Shared by the `queue_bench` bin (the tables of BENCHMARKS.md) and a smoke
//! test that runs it with a tiny task count so it cannot rot.
//!
//! What is measured:
//!
//! - **enqueue, single**: `tasks / 10` calls of `Queue::enqueue`, one after
//!   the other (one transaction each).
//! - **enqueue, batched**: `tasks` tasks through `Queue::enqueue_batch` in
//!   chunks of `batch`.
//! - **processing**: the batched tasks (no-op handler) drained by `workers`
//!   `Worker`s per process (concurrency = batch, batch = batch, poll 10 ms; or,
//!   with `defaults`, `Worker::builder` as it comes), in
//!   `processes` OS processes, from the first claim until the database holds
//!   no pending or running task (checked every 5 ms on a connection of its own).
//! - **claim → complete latency**, p50 and p99: from the moment the handler
//!   starts (right after the claim returned; wall clock) to the task's
//!   `finalized_at`, which the completing statement stamps (PostgreSQL:
//!   `now()` of the completing transaction; SQLite: the worker's clock at its
//!   start). Same host, same clock. Only measured in the parent process.
//! - **raw loop**: `workers` loops per process of the bare two-transaction SQL
//!   (claim `batch` ids `FOR UPDATE SKIP LOCKED` and mark them running; commit;
//!   mark them completed) on a table of its own, `bench_raw_tasks`.

use std::process::Stdio;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use ballast::{Classification, Classify};
use ballast_queue::{Handler, NewTask, Queue, RunSummary, TaskContext, Worker};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

/// The environment variable naming a PostgreSQL database (as in the queue's tests).
pub const PG_ENV: &str = "BALLAST_TEST_PG";

/// The kind of every benchmark task.
const KIND: &str = "bench-noop";

/// Which database to run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchBackend {
    /// A temporary SQLite file.
    Sqlite,
    /// A fresh schema in the PostgreSQL database of `--url` / `BALLAST_TEST_PG`.
    Postgres,
}

impl BenchBackend {
    fn label(self) -> &'static str {
        match self {
            BenchBackend::Sqlite => "SQLite",
            BenchBackend::Postgres => "PostgreSQL",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The database.
    pub backend: BenchBackend,
    /// Tasks processed (and enqueued in batches); `tasks / 10` are enqueued one by one.
    pub tasks: usize,
    /// Claim and enqueue batch size.
    pub batch: usize,
    /// Workers (or raw loops) per process.
    pub workers: usize,
    /// Build the workers with `Worker::builder`'s defaults (no concurrency,
    /// batch or poll interval set) instead of concurrency = batch = `batch`.
    pub defaults: bool,
    /// Run the queue measurements.
    pub queue: bool,
    /// Run the bare SQL loop.
    pub raw: bool,
    /// PostgreSQL URL.
    pub url: Option<String>,
    /// OS processes sharing the processing (PostgreSQL only); the others are
    /// copies of the current executable started with `child_args`.
    pub processes: usize,
    /// How to start a child process: the executable and the arguments that put
    /// it in child mode, to which `--child-schema SCHEMA` is appended.
    pub child_command: Option<(std::path::PathBuf, Vec<String>)>,
}

/// One row of the result table.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// SQLite or PostgreSQL.
    pub backend: &'static str,
    /// What was measured.
    pub what: String,
    /// Tasks in the measurement.
    pub tasks: usize,
    /// Batch size.
    pub batch: usize,
    /// Workers or loops per process.
    pub workers: usize,
    /// OS processes.
    pub processes: usize,
    /// Tasks per second.
    pub rate: f64,
    /// Median claim → complete latency.
    pub p50: Option<Duration>,
    /// 99th percentile claim → complete latency.
    pub p99: Option<Duration>,
    /// The rate as a fraction of the raw loop's in the same run.
    pub vs_raw: Option<f64>,
}

impl Measurement {
    /// The markdown table header matching [`Measurement::row`].
    pub const HEADER: &'static str = "| backend | measurement | tasks | batch | workers/process | processes | tasks/s | p50 | p99 | vs raw loop |\n|---|---|---|---|---|---|---|---|---|---|";

    /// One markdown table row.
    pub fn row(&self) -> String {
        let ms =
            |d: Option<Duration>| d.map_or("–".to_owned(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3));
        let ratio = self.vs_raw.map_or("–".to_owned(), |r| format!("{:.2}×", r));
        format!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} |",
            self.backend,
            self.what,
            self.tasks,
            self.batch,
            self.workers,
            self.processes,
            self.rate,
            ms(self.p50),
            ms(self.p99),
            ratio
        )
    }
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl Classify for Never {
    fn classify(&self) -> Classification {
        Classification::permanent()
    }
}

/// The no-op handler: records when each task started, by its payload index.
#[derive(Clone)]
struct Noop {
    started: Arc<Vec<AtomicI64>>,
}

impl Handler for Noop {
    type Payload = usize;
    type Error = Never;

    async fn handle(&self, _task: TaskContext, index: usize) -> Result<(), Never> {
        if let Some(slot) = self.started.get(index) {
            slot.store(now_micros(), Ordering::Relaxed);
        }
        Ok(())
    }
}

fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// A database for one run: a temp SQLite file or a fresh PostgreSQL schema.
enum Db {
    Sqlite { pool: SqlitePool, options: SqliteConnectOptions, _dir: tempfile::TempDir },
    Pg { pool: PgPool, options: PgConnectOptions, schema: String, url: String },
}

fn pg_url(url: Option<&str>) -> anyhow::Result<String> {
    match url {
        Some(url) => Ok(url.to_owned()),
        None => std::env::var(PG_ENV).with_context(|| format!("PostgreSQL needs --url or {PG_ENV}")),
    }
}

fn pg_options(url: &str, schema: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)?.options([("search_path", schema)]))
}

impl Db {
    async fn open(opts: &Options) -> anyhow::Result<Self> {
        match opts.backend {
            BenchBackend::Sqlite => {
                let dir = tempfile::tempdir()?;
                // The settings `Queue::connect` uses: WAL, synchronous = NORMAL.
                let options = SqliteConnectOptions::new()
                    .filename(dir.path().join("bench.db"))
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(5));
                let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options.clone()).await?;
                Ok(Db::Sqlite { pool, options, _dir: dir })
            }
            BenchBackend::Postgres => {
                let url = pg_url(opts.url.as_deref())?;
                let schema = format!("bench_{}", uuid::Uuid::now_v7().simple());
                let mut admin = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&mut admin).await?;
                admin.close().await?;
                let options = pg_options(&url, &schema)?;
                // The bench's own connections (setup, drain checks) never scan the table.
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.clone().options([("enable_seqscan", "off")]))
                    .await?;
                Ok(Db::Pg { pool, options, schema, url })
            }
        }
    }

    /// A queue with a pool of its own, as `Queue::connect` would build it.
    async fn queue(&self) -> anyhow::Result<Queue> {
        Ok(match self {
            Db::Sqlite { options, .. } => Queue::connect_sqlite(options.clone()).await?,
            Db::Pg { options, .. } => Queue::from_postgres(
                PgPoolOptions::new().max_connections(10).connect_with(options.clone()).await?,
            ),
        })
    }

    async fn exec(&self, sql: &str) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { pool, .. } => {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
            Db::Pg { pool, .. } => {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
        }
        Ok(())
    }

    async fn scalar(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(match self {
            Db::Sqlite { pool, .. } => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Db::Pg { pool, .. } => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    /// `(payload index, finalized_at µs)` of every completed task.
    async fn finalized(&self) -> anyhow::Result<Vec<(i64, i64)>> {
        Ok(match self {
            Db::Sqlite { pool, .. } => {
                sqlx::query_as(&format!(
                    "SELECT CAST(payload AS INTEGER), finalized_at FROM ballast_tasks
                     WHERE kind = '{KIND}' AND state = 'completed'"
                ))
                .fetch_all(pool)
                .await?
            }
            Db::Pg { pool, .. } => {
                sqlx::query_as(&format!(
                    "SELECT (payload::text)::bigint, (extract(epoch FROM finalized_at) * 1000000)::bigint
                     FROM ballast_tasks WHERE kind = '{KIND}' AND state = 'completed'"
                ))
                .fetch_all(pool)
                .await?
            }
        })
    }

    async fn cleanup(self) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { pool, .. } => pool.close().await,
            Db::Pg { pool, schema, url, .. } => {
                pool.close().await;
                let mut admin = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&mut admin).await?;
                admin.close().await?;
            }
        }
        Ok(())
    }
}

/// Runs the measurements of `opts` in a fresh database, cleaned up afterwards.
pub async fn run(opts: &Options) -> anyhow::Result<Vec<Measurement>> {
    if opts.tasks == 0 || opts.batch == 0 || opts.workers == 0 || opts.processes == 0 {
        bail!("tasks, batch, workers and processes must be at least 1");
    }
    if opts.processes > 1 && (opts.backend != BenchBackend::Postgres || opts.child_command.is_none()) {
        bail!("--processes > 1 needs PostgreSQL (and a child command)");
    }
    let db = Db::open(opts).await?;
    let out = measure(&db, opts).await;
    let cleaned = db.cleanup().await;
    let out = out?;
    cleaned?;
    Ok(out)
}

async fn measure(db: &Db, opts: &Options) -> anyhow::Result<Vec<Measurement>> {
    let mut out = Vec::new();
    let row = |what: &str, tasks: usize, rate: f64| Measurement {
        backend: opts.backend.label(),
        what: what.to_owned(),
        tasks,
        batch: opts.batch,
        workers: opts.workers,
        processes: opts.processes,
        rate,
        p50: None,
        p99: None,
        vs_raw: None,
    };
    let mut raw_rate = None;
    if opts.raw {
        let rate = raw_loop(db, opts).await?;
        db.exec("DROP TABLE bench_raw_tasks").await?;
        raw_rate = Some(rate);
        out.push(row("raw SQL loop (2 transactions per batch)", opts.tasks, rate));
    }
    if !opts.queue {
        return Ok(out);
    }
    let queue = db.queue().await?;
    queue.migrate().await?;

    // Enqueue, one by one, then remove those tasks so the claims see only the batched ones.
    let single = (opts.tasks / 10).max(1);
    let start = Instant::now();
    for i in 0..single {
        queue.enqueue(NewTask::new("bench-single", &i)).await?;
    }
    out.push(row("enqueue, one by one", single, single as f64 / start.elapsed().as_secs_f64()));
    db.exec("DELETE FROM ballast_tasks WHERE kind = 'bench-single'").await?;

    let start = Instant::now();
    let mut next = 0;
    while next < opts.tasks {
        let end = (next + opts.batch).min(opts.tasks);
        queue.enqueue_batch((next..end).map(|i| NewTask::new(KIND, &i)).collect()).await?;
        next = end;
    }
    let mut enqueued = row("enqueue_batch", opts.tasks, opts.tasks as f64 / start.elapsed().as_secs_f64());
    enqueued.what = format!("enqueue_batch (chunks of {})", opts.batch);
    out.push(enqueued);
    db.exec(match db {
        Db::Sqlite { .. } => "ANALYZE",
        Db::Pg { .. } => "ANALYZE ballast_tasks",
    })
    .await?;

    let (rate, latencies) = process(db, &queue, opts).await?;
    let what = if opts.defaults {
        "processing (no-op handler, worker defaults)"
    } else {
        "processing (no-op handler)"
    };
    let mut processed = row(what, opts.tasks, rate);
    if let Some(mut latencies) = latencies.filter(|l| !l.is_empty()) {
        latencies.sort_unstable();
        let pick = |q: f64| {
            let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
            Duration::from_micros(latencies[i].max(0) as u64)
        };
        processed.p50 = Some(pick(0.50));
        processed.p99 = Some(pick(0.99));
    }
    processed.vs_raw = raw_rate.map(|raw| rate / raw);
    out.push(processed);
    Ok(out)
}

fn build_worker(queue: Queue, opts: &Options, started: Arc<Vec<AtomicI64>>) -> anyhow::Result<Worker> {
    let builder = Worker::builder(queue).handler(KIND, Noop { started });
    if opts.defaults {
        return Ok(builder.build()?);
    }
    Ok(builder.concurrency(opts.batch).batch(opts.batch).poll_interval(Duration::from_millis(10)).build()?)
}

/// Drains the queue; returns the combined rate and, in the parent process,
/// the claim → complete latencies in µs.
async fn process(db: &Db, queue: &Queue, opts: &Options) -> anyhow::Result<(f64, Option<Vec<i64>>)> {
    let started: Arc<Vec<AtomicI64>> = Arc::new((0..opts.tasks).map(|_| AtomicI64::new(0)).collect());
    let mut children = Vec::new();
    if opts.processes > 1 {
        let (Db::Pg { schema, .. }, Some((exe, args))) = (db, &opts.child_command) else {
            bail!("--processes > 1 needs PostgreSQL");
        };
        for _ in 1..opts.processes {
            let mut child = tokio::process::Command::new(exe)
                .args(args)
                .arg("--child-schema")
                .arg(schema)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .context("starting a child worker process")?;
            let stdout = child.stdout.take().context("child stdout")?;
            let mut lines = BufReader::new(stdout).lines();
            match lines.next_line().await? {
                Some(line) if line == "ready" => {}
                other => bail!("child worker did not get ready: {other:?}"),
            }
            children.push((child, lines));
        }
    }
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().context("child stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    let mut workers = Vec::new();
    for _ in 0..opts.workers {
        let worker = build_worker(queue.clone(), opts, Arc::clone(&started))?;
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    wait_drained(db).await?;
    let elapsed = start.elapsed();
    shutdown.cancel();
    let mut summaries: Vec<RunSummary> = Vec::new();
    for worker in workers {
        summaries.push(worker.await?);
    }
    for (mut child, mut lines) in children {
        drop(child.stdin.take());
        let _ = lines.next_line().await?;
        child.wait().await?;
    }
    let rate = opts.tasks as f64 / elapsed.as_secs_f64();
    let latencies = if opts.processes == 1 {
        let done = db.finalized().await?;
        Some(
            done.into_iter()
                .filter_map(|(index, finalized)| {
                    let start = started.get(usize::try_from(index).ok()?)?.load(Ordering::Relaxed);
                    (start > 0).then(|| finalized - start)
                })
                .collect(),
        )
    } else {
        None
    };
    Ok((rate, latencies))
}

/// Returns once no task is pending or running. The check walks the live
/// index (never the table: a scan would cost the database more and more as
/// completed rows pile up, and slow the queue being measured).
async fn wait_drained(db: &Db) -> anyhow::Result<()> {
    let sql = match db {
        Db::Sqlite { .. } => {
            "SELECT EXISTS (SELECT 1 FROM ballast_tasks INDEXED BY ballast_tasks_live
                            WHERE finalized_at IS NULL)"
        }
        // The pool of `Db` has enable_seqscan off, so this uses the live index.
        Db::Pg { .. } => {
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM ballast_tasks WHERE finalized_at IS NULL)
                    THEN 1::bigint ELSE 0::bigint END"
        }
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    while db.scalar(sql).await? != 0 {
        if Instant::now() > deadline {
            bail!("the queue did not drain within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// A child process: workers on the queue in `schema` from "go" on stdin until
/// stdin closes; prints "ready" once connected and "done N" at the end.
pub async fn child(opts: &Options, schema: &str) -> anyhow::Result<()> {
    let url = pg_url(opts.url.as_deref())?;
    let pool = PgPoolOptions::new().max_connections(10).connect_with(pg_options(&url, schema)?).await?;
    let queue = Queue::from_postgres(pool);
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    if stdin.next_line().await?.as_deref() != Some("go") {
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    let started = Arc::new(Vec::new());
    let mut workers = Vec::new();
    for _ in 0..opts.workers {
        let worker = build_worker(queue.clone(), opts, Arc::clone(&started))?;
        workers.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    while stdin.next_line().await?.is_some() {}
    shutdown.cancel();
    let mut completed = 0;
    for worker in workers {
        completed += worker.await?.completed;
    }
    stdout.write_all(format!("done {completed}\n").as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}

/// The bare loop: `workers` concurrent loops, each claiming `batch` ids and
/// completing them in a second transaction, until the table is drained.
async fn raw_loop(db: &Db, opts: &Options) -> anyhow::Result<f64> {
    let n = opts.tasks;
    match db {
        Db::Pg { options, .. } => {
            db.exec(
                "CREATE TABLE bench_raw_tasks (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    state TEXT NOT NULL DEFAULT 'pending',
                    payload JSONB NOT NULL,
                    updated_at TIMESTAMPTZ NOT NULL DEFAULT now());
                 CREATE INDEX bench_raw_tasks_pending ON bench_raw_tasks (id) WHERE state = 'pending'",
            )
            .await?;
            db.exec(&format!(
                "INSERT INTO bench_raw_tasks (payload) SELECT to_jsonb(i) FROM generate_series(1, {n}) i;
                 ANALYZE bench_raw_tasks"
            ))
            .await?;
            let mut loops = Vec::new();
            for _ in 0..opts.workers {
                let mut conn = sqlx::PgConnection::connect_with(options).await?;
                let batch = opts.batch as i64;
                loops.push(async move {
                    let mut done = 0usize;
                    loop {
                        let mut tx = conn.begin().await?;
                        let ids: Vec<i64> = sqlx::query_scalar(
                            "SELECT id FROM bench_raw_tasks WHERE state = 'pending'
                             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
                        )
                        .bind(batch)
                        .fetch_all(&mut *tx)
                        .await?;
                        if ids.is_empty() {
                            tx.commit().await?;
                            break;
                        }
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'running', updated_at = now() WHERE id = ANY($1)",
                        )
                        .bind(&ids)
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'completed', updated_at = now()
                             WHERE id = ANY($1)",
                        )
                        .bind(&ids)
                        .execute(&mut conn)
                        .await?;
                        done += ids.len();
                    }
                    anyhow::Ok(done)
                });
            }
            let start = Instant::now();
            let done: usize = futures_util::future::try_join_all(loops).await?.into_iter().sum();
            let rate = done as f64 / start.elapsed().as_secs_f64();
            anyhow::ensure!(done == n, "raw loop completed {done} of {n}");
            Ok(rate)
        }
        Db::Sqlite { options, .. } => {
            db.exec(
                "CREATE TABLE bench_raw_tasks (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    state TEXT NOT NULL DEFAULT 'pending',
                    payload TEXT NOT NULL,
                    updated_at INTEGER NOT NULL DEFAULT 0);
                 CREATE INDEX bench_raw_tasks_pending ON bench_raw_tasks (id) WHERE state = 'pending'",
            )
            .await?;
            db.exec(&format!(
                "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})
                 INSERT INTO bench_raw_tasks (payload) SELECT i FROM s; ANALYZE"
            ))
            .await?;
            let mut loops = Vec::new();
            for _ in 0..opts.workers {
                let mut conn = sqlx::SqliteConnection::connect_with(options).await?;
                let batch = opts.batch as i64;
                loops.push(async move {
                    let mut done = 0usize;
                    loop {
                        // IMMEDIATE: take the write lock before reading, so
                        // concurrent loops queue up instead of failing.
                        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                        let ids: Vec<i64> = sqlx::query_scalar(
                            "SELECT id FROM bench_raw_tasks WHERE state = 'pending' ORDER BY id LIMIT ?1",
                        )
                        .bind(batch)
                        .fetch_all(&mut *tx)
                        .await?;
                        if ids.is_empty() {
                            tx.commit().await?;
                            break;
                        }
                        let list = serde_json::to_string(&ids)?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'running', updated_at = ?2
                             WHERE id IN (SELECT value FROM json_each(?1))",
                        )
                        .bind(&list)
                        .bind(now_micros())
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'completed', updated_at = ?2
                             WHERE id IN (SELECT value FROM json_each(?1))",
                        )
                        .bind(&list)
                        .bind(now_micros())
                        .execute(&mut conn)
                        .await?;
                        done += ids.len();
                    }
                    anyhow::Ok(done)
                });
            }
            let start = Instant::now();
            let done: usize = futures_util::future::try_join_all(loops).await?.into_iter().sum();
            let rate = done as f64 / start.elapsed().as_secs_f64();
            anyhow::ensure!(done == n, "raw loop completed {done} of {n}");
            Ok(rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(backend: BenchBackend) -> Options {
        Options {
            backend,
            tasks: 200,
            batch: 50,
            workers: 1,
            defaults: false,
            queue: true,
            raw: true,
            url: None,
            processes: 1,
            child_command: None,
        }
    }

    fn check(rows: &[Measurement]) {
        assert_eq!(rows.len(), 4, "{rows:#?}");
        assert!(rows.iter().all(|r| r.rate > 0.0), "{rows:#?}");
        let processed = &rows[3];
        assert!(processed.p50.is_some() && processed.p99 >= processed.p50, "{processed:#?}");
        assert!(processed.vs_raw.is_some());
        for r in rows {
            assert!(r.row().starts_with("| "));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn smoke_sqlite() {
        check(&run(&tiny(BenchBackend::Sqlite)).await.expect("bench runs"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn smoke_postgres() {
        if std::env::var(PG_ENV).is_err() {
            eprintln!("skipped: {PG_ENV} not set");
            return;
        }
        check(&run(&tiny(BenchBackend::Postgres)).await.expect("bench runs"));
    }
}
