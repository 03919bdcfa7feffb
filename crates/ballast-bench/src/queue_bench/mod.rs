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
//!   own, once every handler has started: a check walks the pending and running indexes, and
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
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use ballast_queue::{Handler, NewTask, Queue, TaskContext, Worker};

mod db;
mod drain;
mod latency;
mod raw;

use db::*;
pub use drain::child;
use drain::*;
use latency::*;
use raw::*;

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
    /// Sequences the processed tasks are spread over, task `i` in sequence
    /// `i % sequences` (0: none): what running a sequence's tasks one at a
    /// time, each released by the completion before it, costs.
    pub sequences: usize,
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
        let task = |i: usize| match opts.sequences {
            0 => NewTask::new(KIND, &i),
            n => NewTask::new(KIND, &i).sequence(format!("bench/{}", i % n)),
        };
        queue.enqueue_batch((next..end).map(task).collect()).await?;
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
    let mut what = String::from(if opts.defaults {
        "processing (no-op handler, worker defaults"
    } else {
        "processing (no-op handler"
    });
    if opts.sequences > 0 {
        what.push_str(&format!(", {} sequences", opts.sequences));
    }
    what.push(')');
    let mut processed = row(&what, opts.tasks, rate);
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

/// The `q` quantile of `sorted`.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or_default()
}

fn build_worker(queue: Queue, opts: &QueueBenchOptions, started: Arc<Started>) -> anyhow::Result<Worker> {
    let builder = Worker::builder(queue).handler(KIND, Noop { started });
    if opts.defaults {
        return Ok(builder.build()?);
    }
    Ok(builder.concurrency(opts.batch).batch(opts.batch).poll_interval(Duration::from_millis(10)).build()?)
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
            sequences: 0,
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
