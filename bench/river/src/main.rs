//! River for Rust draining no-op jobs on the PostgreSQL database the ballast
//! queue bench uses, in a schema of its own (dropped afterwards).
//!
//! ```text
//! river-bench --url URL --tasks N --config default|tuned [--batch B] [--single S]
//! ```
//!
//! Prints one line: `river <config> enqueue_single=R enqueue_batch=R processing=R`
//! (tasks per second). `default` is River's timing defaults with 100 workers;
//! `tuned` is 1,000 workers, a 1 ms fetch cooldown and a 10 ms poll interval.

use std::time::{Duration, Instant};

use riverqueue::database::{PostgresDatabase, SchemaName};
use riverqueue::migrate::PostgresMigrator;
use riverqueue::sqlx::{self, postgres::PgPoolOptions};
use riverqueue::{BoxError, Client, Job, JobArgs, QueueConfig, WorkContext, WorkOutcome, Workers};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, JobArgs, Serialize)]
#[river(kind = "bench_noop")]
struct Noop {
    index: usize,
}

async fn noop(_context: WorkContext, _job: Job<Noop>) -> Result<WorkOutcome, BoxError> {
    Ok(WorkOutcome::Complete)
}

struct Args {
    url: String,
    tasks: usize,
    batch: usize,
    single: usize,
    tuned: bool,
}

fn args() -> Result<Args, BoxError> {
    let mut out = Args {
        url: std::env::var("BALLAST_TEST_PG").unwrap_or_default(),
        tasks: 100_000,
        batch: 50,
        single: 0,
        tuned: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => out.url = value,
            "--tasks" => out.tasks = value.parse()?,
            "--batch" => out.batch = value.parse()?,
            "--single" => out.single = value.parse()?,
            "--config" => out.tuned = value == "tuned",
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    if out.url.is_empty() {
        return Err("--url or BALLAST_TEST_PG is needed".into());
    }
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let args = args()?;
    let schema_name = format!("river_bench_{}", std::process::id());
    let pool = PgPoolOptions::new().max_connections(10).connect(&args.url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema_name}"))).execute(&pool).await?;
    let result = run(&args, &pool, &schema_name).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema_name} CASCADE"))).execute(&pool).await?;
    let line = result?;
    println!("{line}");
    Ok(())
}

async fn run(args: &Args, pool: &sqlx::PgPool, schema_name: &str) -> Result<String, BoxError> {
    let schema = SchemaName::new(schema_name)?;
    PostgresMigrator::new(pool.clone()).with_schema(schema.clone()).migrate_up().await?;
    let mut workers = Workers::new();
    workers.add_fn(noop)?;
    let queue = if args.tuned {
        QueueConfig::new(1_000)
            .with_fetch_cooldown(Duration::from_millis(1))
            .with_fetch_poll_interval(Duration::from_millis(10))
    } else {
        QueueConfig::new(100)
    };
    let mut builder = Client::builder(PostgresDatabase::new(pool.clone()).with_schema(schema))
        .workers(workers)
        .queue("default", queue);
    if args.tuned {
        builder = builder.fetch_cooldown(Duration::from_millis(1));
    }
    let client = builder.build()?;

    // Enqueue one by one (default tasks / 10), then remove those jobs.
    let single = if args.single > 0 { args.single } else { (args.tasks / 10).max(1) };
    let start = Instant::now();
    for index in 0..single {
        client.insert(Noop { index }).await?;
    }
    let enqueue_single = single as f64 / start.elapsed().as_secs_f64();
    sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {schema_name}.river_job"))).execute(pool).await?;

    let start = Instant::now();
    let mut next = 0;
    while next < args.tasks {
        let end = (next + args.batch).min(args.tasks);
        client.insert_many((next..end).map(|index| Noop { index })).await?;
        next = end;
    }
    let enqueue_batch = args.tasks as f64 / start.elapsed().as_secs_f64();
    sqlx::query(sqlx::AssertSqlSafe(format!("ANALYZE {schema_name}.river_job"))).execute(pool).await?;

    let check = format!(
        "SELECT EXISTS (SELECT 1 FROM {schema_name}.river_job WHERE state IN ('available', 'running'))"
    );
    let start = Instant::now();
    let mut handle = client.start()?;
    let deadline = start + Duration::from_secs(900);
    while sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(check.as_str())).fetch_one(pool).await? {
        if Instant::now() > deadline {
            return Err("River did not drain within 15 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let processing = args.tasks as f64 / start.elapsed().as_secs_f64();
    handle.stop().await?;
    let completed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema_name}.river_job WHERE state = 'completed'"
    )))
    .fetch_one(pool)
    .await?;
    if completed as usize != args.tasks {
        return Err(format!("River completed {completed} of {} jobs", args.tasks).into());
    }
    let config = if args.tuned { "tuned" } else { "default" };
    Ok(format!(
        "river {config} enqueue_single={enqueue_single:.0} enqueue_batch={enqueue_batch:.0} processing={processing:.0}"
    ))
}
