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
//!   no pending or running task (checked every 2 ms on a connection of its
//!   own, once every handler has started: a check walks the live index, and
//!   checking all along would take the database's time from the workers).
//! - **claim → complete latency**, p50 and p99: from the moment the handler
//!   starts (right after the claim returned; wall clock) to the task's
//!   `finalized_at`, which the completing statement stamps (PostgreSQL:
//!   `now()` of the completing transaction; SQLite: the worker's clock at its
//!   start). Same host, same clock. Only measured in the parent process.
//! - **claim latency** (`latency` samples): one task due at a time, from the
//!   enqueue's return to its handler's start, enqueued in the worker's
//!   process (the worker is woken at once) and through another pool (on
//!   PostgreSQL the NOTIFY of the insert wakes the worker; SQLite has no
//!   notifications across processes, so the worker's poll finds it, every
//!   100 ms here).
//! - **retained**: the same with `retained` finished tasks already in the
//!   table, as a week of history would leave them before retention runs.
//! - **raw loop**: `workers` loops per process of the bare two-transaction SQL
//!   (claim `batch` ids `FOR UPDATE SKIP LOCKED` and mark them running; commit;
//!   mark them completed) on a table of its own, `bench_raw_tasks`.

use std::convert::Infallible;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use ballast_queue::{Handler, NewTask, Queue, RunSummary, TaskContext, Worker};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
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
pub struct QueueBenchOptions {
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
    /// Finished tasks (of another kind, completed a day ago) in the table
    /// before anything is enqueued: a queue with a week of history.
    pub retained: usize,
    /// Claim latency samples to take after the processing (0: none): one
    /// task due at a time, enqueued by this queue (the worker is woken in
    /// the process) and by another pool on the same database (PostgreSQL:
    /// LISTEN/NOTIFY; SQLite: the worker's poll, every 100 ms here).
    pub latency: usize,
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
    /// CPU time of the whole machine (the database's processes included)
    /// per task while the tasks were processed, where `/proc/stat` tells.
    pub cpu_per_task: Option<Duration>,
    /// Of that, the bench process's own (the workers or the loops), for the
    /// processes of this run in the parent only.
    pub own_cpu_per_task: Option<Duration>,
}

impl Measurement {
    /// The markdown table header matching [`Measurement::row`].
    pub const HEADER: &'static str = "| backend | measurement | tasks | batch | workers/process | processes | tasks/s | p50 | p99 | vs raw loop | machine CPU/task | own CPU/task |\n|---|---|---|---|---|---|---|---|---|---|---|---|";

    /// One markdown table row.
    pub fn row(&self) -> String {
        let ms =
            |d: Option<Duration>| d.map_or("–".to_owned(), |d| format!("{:.2} ms", d.as_secs_f64() * 1e3));
        let rate = if self.rate > 0.0 { format!("{:.0}", self.rate) } else { "–".to_owned() };
        let ratio = self.vs_raw.map_or("–".to_owned(), |r| format!("{:.2}×", r));
        let us =
            |d: Option<Duration>| d.map_or("–".to_owned(), |d| format!("{:.1} µs", d.as_secs_f64() * 1e6));
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.backend,
            self.what,
            self.tasks,
            self.batch,
            self.workers,
            self.processes,
            rate,
            ms(self.p50),
            ms(self.p99),
            ratio,
            us(self.cpu_per_task),
            us(self.own_cpu_per_task)
        )
    }
}

/// When each task's handler started, by its payload index, and how many did.
#[derive(Default)]
struct Started {
    at: Vec<AtomicI64>,
    count: AtomicUsize,
}

/// The no-op handler: records when each task started.
#[derive(Clone)]
struct Noop {
    started: Arc<Started>,
}

impl Handler for Noop {
    type Payload = usize;
    type Error = Infallible;

    async fn handle(&self, _task: TaskContext, index: usize) -> Result<(), Infallible> {
        if let Some(slot) = self.started.at.get(index) {
            slot.store(now_micros(), Ordering::Relaxed);
        }
        self.started.count.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The busy CPU time of the whole machine so far, and of this process, from
/// `/proc/stat` and `/proc/self/stat` (in USER_HZ ticks, 100 a second on
/// Linux); `None` where there are no such files.
struct MachineCpu {
    machine: Option<u64>,
    process: Option<u64>,
}

impl MachineCpu {
    fn now() -> Self {
        let stat = std::fs::read_to_string("/proc/stat").ok();
        let machine = stat.as_deref().and_then(|text| {
            let fields: Vec<u64> =
                text.lines().next()?.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal: all but idle and iowait.
            Some(fields.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum())
        });
        let own = std::fs::read_to_string("/proc/self/stat").ok();
        // utime and stime are the 14th and 15th fields; the name (2nd) is in
        // parentheses and may hold spaces, so count after its ')'.
        let process = own.as_deref().and_then(|text| {
            let after = &text[text.rfind(')')? + 1..];
            let fields: Vec<u64> = after.split_whitespace().filter_map(|f| f.parse().ok()).collect();
            Some(fields.get(10)? + fields.get(11)?)
        });
        Self { machine, process }
    }

    /// Machine and process CPU time per task since `self`.
    fn per(&self, tasks: usize) -> (Option<Duration>, Option<Duration>) {
        let now = Self::now();
        let per =
            |ticks: Option<u64>| Duration::from_secs_f64(ticks? as f64 / 100.0 / tasks.max(1) as f64).into();
        let since = |a: Option<u64>, b: Option<u64>| a?.checked_sub(b?);
        (per(since(now.machine, self.machine)), per(since(now.process, self.process)))
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
    async fn open(opts: &QueueBenchOptions) -> anyhow::Result<Self> {
        match opts.backend {
            BenchBackend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let options = Queue::sqlite_options(dir.path().join("bench.db"));
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
            // All ten connections open before anything is measured, as the
            // bare loop opens its own before its clock starts: a new
            // PostgreSQL backend costs milliseconds of CPU before its first
            // statement, which a worker pays once in its life.
            Db::Pg { options, .. } => Queue::from_postgres(
                Queue::pg_pool_options().min_connections(10).connect_with(options.clone()).await?,
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

    /// Inserts `n` tasks completed a day ago, of a kind no worker claims.
    async fn retain(&self, n: usize) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { .. } => {
                let day_ago = now_micros() - 86_400_000_000;
                self.exec(&format!(
                    "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})
                     INSERT INTO ballast_tasks (kind, payload, state, attempt, run_at, created_at, updated_at, finalized_at)
                     SELECT 'bench-history', i, 'completed', 1, {day_ago}, {day_ago}, {day_ago}, {day_ago} FROM s;
                     ANALYZE"
                ))
                .await
            }
            Db::Pg { .. } => {
                self.exec(&format!(
                    "INSERT INTO ballast_tasks (kind, payload, state, attempt, run_at, created_at, updated_at, finalized_at)
                     SELECT 'bench-history', to_jsonb(i), 'completed', 1, t, t, t, t
                     FROM generate_series(1, {n}) i, (SELECT now() - interval '1 day' AS t) d;
                     ANALYZE ballast_tasks; CHECKPOINT"
                ))
                .await
            }
        }
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
pub async fn run(opts: &QueueBenchOptions) -> anyhow::Result<Vec<Measurement>> {
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

async fn measure(db: &Db, opts: &QueueBenchOptions) -> anyhow::Result<Vec<Measurement>> {
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
        cpu_per_task: None,
        own_cpu_per_task: None,
    };
    let mut raw_rate = None;
    if opts.raw {
        let busy = MachineCpu::now();
        let rate = raw_loop(db, opts).await?;
        let (cpu, own) = busy.per(opts.tasks);
        db.exec("DROP TABLE bench_raw_tasks").await?;
        raw_rate = Some(rate);
        let raw = row("raw SQL loop (2 transactions per batch)", opts.tasks, rate);
        out.push(Measurement { cpu_per_task: cpu, own_cpu_per_task: own, ..raw });
    }
    if !opts.queue {
        return Ok(out);
    }
    let queue = db.queue().await?;
    queue.migrate().await?;
    if opts.retained > 0 {
        db.retain(opts.retained).await?;
    }

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

    let busy = MachineCpu::now();
    let (rate, latencies) = process(db, &queue, opts).await?;
    let (cpu, own) = busy.per(opts.tasks);
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
    processed.cpu_per_task = cpu;
    processed.own_cpu_per_task = own.filter(|_| opts.processes == 1);
    out.push(processed);
    if opts.latency > 0 {
        for (what, other) in
            [("claim latency, enqueued in the process", false), ("claim latency, enqueued elsewhere", true)]
        {
            let latencies = claim_latency(db, &queue, opts.latency, other).await?;
            let mut row = row(what, opts.latency, 0.0);
            if other {
                row.what = match db {
                    Db::Sqlite { .. } => format!("{what} (poll every {} ms)", POLL.as_millis()),
                    Db::Pg { .. } => format!("{what} (LISTEN/NOTIFY)"),
                };
            }
            (row.p50, row.p99) = (Some(quantile(&latencies, 0.50)), Some(quantile(&latencies, 0.99)));
            out.push(row);
        }
    }
    Ok(out)
}

/// The latency worker's poll interval: the bound of the poll path.
const POLL: Duration = Duration::from_millis(100);

/// The `q` quantile of `sorted`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or_default()
}

/// Tells when the handler of each latency task started.
struct Signal(tokio::sync::mpsc::UnboundedSender<Instant>);

impl Handler for Signal {
    type Payload = usize;
    type Error = Infallible;

    async fn handle(&self, _task: TaskContext, _: usize) -> Result<(), Infallible> {
        let _ = self.0.send(Instant::now());
        Ok(())
    }
}

/// `samples` tasks, one at a time with the worker idle in between: from the
/// enqueue's return to the handler's start, sorted. `other`: enqueued
/// through a pool of its own, as another process would.
async fn claim_latency(db: &Db, queue: &Queue, samples: usize, other: bool) -> anyhow::Result<Vec<Duration>> {
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let worker = Worker::builder(queue.clone())
        .handler("bench-latency", Signal(started))
        .poll_interval(POLL)
        .build()?;
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let producer = if other { db.queue().await? } else { queue.clone() };
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        // Idle long enough for the worker to be waiting, at an odd offset
        // from its poll so the poll path is sampled all along its interval.
        tokio::time::sleep(Duration::from_millis(50 + (i as u64 * 37) % 100)).await;
        producer.enqueue(NewTask::new("bench-latency", &i)).await?;
        let enqueued = Instant::now();
        let start = tokio::time::timeout(Duration::from_secs(30), starts.recv())
            .await
            .context("a latency task was not claimed within 30 s")?
            .context("the worker stopped")?;
        latencies.push(start.saturating_duration_since(enqueued));
    }
    shutdown.cancel();
    running.await?;
    latencies.sort_unstable();
    Ok(latencies)
}

fn build_worker(queue: Queue, opts: &QueueBenchOptions, started: Arc<Started>) -> anyhow::Result<Worker> {
    let builder = Worker::builder(queue).handler(KIND, Noop { started });
    if opts.defaults {
        return Ok(builder.build()?);
    }
    Ok(builder.concurrency(opts.batch).batch(opts.batch).poll_interval(Duration::from_millis(10)).build()?)
}

/// Drains the queue; returns the combined rate and, in the parent process,
/// the claim → complete latencies in µs.
async fn process(
    db: &Db,
    queue: &Queue,
    opts: &QueueBenchOptions,
) -> anyhow::Result<(f64, Option<Vec<i64>>)> {
    let started =
        Arc::new(Started { at: (0..opts.tasks).map(|_| AtomicI64::new(0)).collect(), ..Started::default() });
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
    if opts.processes == 1 {
        // Every handler has run before the database can be drained: until
        // then the check costs nothing but this process's own counter.
        while started.count.load(Ordering::Relaxed) < opts.tasks {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
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
                    let start = started.at.get(usize::try_from(index).ok()?)?.load(Ordering::Relaxed);
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
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// A child process: workers on the queue in `schema` from "go" on stdin until
/// stdin closes; prints "ready" once connected and "done N" at the end.
pub async fn child(opts: &QueueBenchOptions, schema: &str) -> anyhow::Result<()> {
    let url = pg_url(opts.url.as_deref())?;
    let pool = Queue::pg_pool_options().connect_with(pg_options(&url, schema)?).await?;
    let queue = Queue::from_postgres(pool);
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    if stdin.next_line().await?.as_deref() != Some("go") {
        return Ok(());
    }
    let shutdown = CancellationToken::new();
    let started = Arc::new(Started::default());
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
async fn raw_loop(db: &Db, opts: &QueueBenchOptions) -> anyhow::Result<f64> {
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
            drain_rate(loops, n).await
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
            drain_rate(loops, n).await
        }
    }
}

/// Runs the raw loops together: tasks per second, once all `n` are done.
async fn drain_rate(
    loops: Vec<impl std::future::Future<Output = anyhow::Result<usize>>>,
    n: usize,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let done: usize = futures_util::future::try_join_all(loops).await?.into_iter().sum();
    let rate = done as f64 / start.elapsed().as_secs_f64();
    anyhow::ensure!(done == n, "raw loop completed {done} of {n}");
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(backend: BenchBackend) -> QueueBenchOptions {
        QueueBenchOptions {
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
            retained: 100,
            latency: 3,
        }
    }

    fn check(rows: &[Measurement]) {
        assert_eq!(rows.len(), 6, "{rows:#?}");
        assert!(rows[..4].iter().all(|r| r.rate > 0.0), "{rows:#?}");
        let processed = &rows[3];
        for latency in &rows[4..] {
            assert!(latency.what.starts_with("claim latency") && latency.p50.is_some(), "{latency:#?}");
        }
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
