//! Prints the durable-queue tables of BENCHMARKS.md: enqueue rates, processing
//! rate and claim → complete latency of `ballast-queue`, and the bare SQL loop
//! on the same database.
//!
//! ```text
//! cargo run --release -p ballast-bench --bin queue_bench -- \
//!     --backend sqlite|postgres --tasks N --batch B --workers W [--raw | --compare] \
//!     [--defaults] [--url URL] [--processes P] [--retained N] [--latency SAMPLES] \
//!     [--sequences S]
//! ```
//!
//! PostgreSQL runs in a fresh schema of `--url` (default: `$BALLAST_TEST_PG`),
//! dropped afterwards; SQLite in a temporary file.

use ballast_bench::queue_bench::{child, run, BenchBackend, Measurement, QueueBenchOptions};
use clap::Parser;

/// Durable queue throughput and latency.
#[derive(Parser, Debug)]
struct Args {
    /// The database.
    #[arg(long, value_enum)]
    backend: BenchBackend,
    /// Tasks to process (tasks / 10 are also enqueued one by one).
    #[arg(long, default_value_t = 100_000)]
    tasks: usize,
    /// Claim and enqueue batch size.
    #[arg(long, default_value_t = 50)]
    batch: usize,
    /// Workers (raw loops) per process.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Workers as `Worker::builder` makes them, untuned (`--batch` then only
    /// sets the enqueue chunks).
    #[arg(long)]
    defaults: bool,
    /// Only the bare SQL loop.
    #[arg(long, conflicts_with = "compare")]
    raw: bool,
    /// The bare SQL loop, then the queue, with the queue's rate as a fraction of the loop's.
    #[arg(long)]
    compare: bool,
    /// PostgreSQL URL (default: $BALLAST_TEST_PG).
    #[arg(long)]
    url: Option<String>,
    /// OS processes sharing the processing (PostgreSQL).
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Internal: run as a child worker process on this schema.
    #[arg(long, hide = true)]
    child_schema: Option<String>,
    /// Print no table header.
    #[arg(long)]
    no_header: bool,
    /// Finished tasks already in the table (completed a day ago, another kind).
    #[arg(long, default_value_t = 0)]
    retained: usize,
    /// Claim latency samples to take, one task due at a time (0: none).
    #[arg(long, default_value_t = 0)]
    latency: usize,
    /// Spread the processed tasks over this many sequences (0: none).
    #[arg(long, default_value_t = 0)]
    sequences: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut child_args = vec![
        "--backend".to_owned(),
        "postgres".to_owned(),
        "--batch".to_owned(),
        args.batch.to_string(),
        "--workers".to_owned(),
        args.workers.to_string(),
    ];
    if let Some(url) = &args.url {
        child_args.extend(["--url".to_owned(), url.clone()]);
    }
    if args.defaults {
        child_args.push("--defaults".to_owned());
    }
    let opts = QueueBenchOptions {
        backend: args.backend,
        tasks: args.tasks,
        batch: args.batch,
        workers: args.workers,
        defaults: args.defaults,
        queue: !args.raw,
        raw: args.raw || args.compare,
        url: args.url,
        processes: args.processes,
        child_command: Some((std::env::current_exe()?, child_args)),
        retained: args.retained,
        latency: args.latency,
        sequences: args.sequences,
    };
    if let Some(schema) = args.child_schema {
        return child(&opts, &schema).await;
    }
    let rows = run(&opts).await?;
    if !args.no_header {
        println!("{}", Measurement::HEADER);
    }
    for row in rows {
        println!("{}", row.row());
    }
    Ok(())
}
