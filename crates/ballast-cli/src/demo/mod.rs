//! `ballast demo`: the whole story end to end against a local, deliberately
//! unreliable payment gateway.
//!
//! The same orders meet the same seeded faults twice: once through a naive
//! client that retries everything without a key, once through ballast (one
//! `HttpSystem` with its policy, the durable queue on embedded SQLite and its
//! worker). The gateway's ledger then says what really happened.

mod faults;
mod gateway;
mod guarded;
mod naive;
mod progress;
mod report;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use ballast::IdempotencyKey;
use ballast_queue::Queue;

use faults::FaultPlan;
use gateway::FlakyGateway;
use guarded::{Guarded, Timings};
use naive::Naive;
use report::{Column, Report};
use workload::Workload;

/// Arguments of `ballast demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Orders per client [default: 300, or 120 with --quick].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    orders: Option<u32>,
    /// Seed of the gateway's faults: the same seed replays the same bad day.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// A shorter run (under 15 s): fewer orders, a shorter outage.
    #[arg(long)]
    quick: bool,
    /// Keep the durable queue in this SQLite file, to look at afterwards
    /// [default: a temporary file removed at exit].
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
}

/// The knobs that differ between a full and a quick run.
#[derive(Debug, Clone, Copy)]
struct Pace {
    orders: u32,
    /// Orders arriving per second.
    rate: u32,
    outage: Duration,
    /// The naive client's constant delay between attempts.
    naive_delay: Duration,
    /// How long to wait for the worker to empty the queue.
    drain_limit: Duration,
}

impl Pace {
    const FULL: Pace = Pace {
        orders: 300,
        rate: 25,
        outage: Duration::from_secs(4),
        naive_delay: Duration::from_millis(100),
        drain_limit: Duration::from_secs(20),
    };
    const QUICK: Pace = Pace {
        orders: 120,
        rate: 30,
        outage: Duration::from_millis(1600),
        naive_delay: Duration::from_millis(50),
        drain_limit: Duration::from_secs(6),
    };
}

/// Orders handled at once by either client.
const IN_FLIGHT: usize = 16;

/// Runs `ballast demo`.
pub fn run(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(demo(args))?;
    Ok(ExitCode::SUCCESS)
}

async fn demo(args: &DemoArgs) -> anyhow::Result<()> {
    let pace = if args.quick { Pace::QUICK } else { Pace::FULL };
    let timings = Timings::DEMO;
    let workload = Workload {
        run: IdempotencyKey::v7().as_str().to_owned(),
        orders: args.orders.unwrap_or(pace.orders),
        arrival: Duration::from_secs(1) / pace.rate,
        in_flight: IN_FLIGHT,
    };
    // The outage hits about a third into the orders, so both clients have
    // settled before it and have orders left after it.
    let plan = FaultPlan::new(args.seed, workload.span() * 3 / 10, pace.outage, timings.attempt * 2);
    let payable = (1..=workload.orders).filter(|&o| !plan.declined(o)).count() as u64;

    let temp;
    let db = match &args.db {
        Some(path) => path.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("ballast-demo-").tempdir()?;
            temp.path().join("queue.db")
        }
    };
    let db_url = format!("sqlite://{}", db.display());
    let queue = Queue::connect(&db_url).await.with_context(|| format!("cannot open the queue {db_url}"))?;
    queue.migrate().await.with_context(|| format!("cannot create the queue's table in {db_url}"))?;

    print!("{}", header(args, &workload, &plan, &pace, &timings, payable, &db_url)?);
    let naive = run_naive(&workload, plan, &pace, &timings).await?;
    let ballast = run_ballast(&workload, plan, &pace, &timings, queue, args.seed).await?;
    println!();
    print!("{}", Report { orders: workload.orders, payable, naive, ballast });
    if let Some(path) = &args.db {
        let path = path.display();
        println!("\nThe queue is kept in {path}: see its tasks with `ballast queue list --db {path} --state failed`.");
    }
    Ok(())
}

fn header(
    args: &DemoArgs,
    workload: &Workload,
    plan: &FaultPlan,
    pace: &Pace,
    timings: &Timings,
    payable: u64,
    db_url: &str,
) -> anyhow::Result<String> {
    let ms = |d: Duration| format!("{} ms", d.as_millis());
    let s = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let window = timings.policy(args.seed)?.worst_case();
    let declined = u64::from(workload.orders) - payable;
    let kept = if args.db.is_some() { "kept" } else { "temporary" };
    Ok(format!(
        "ballast demo, seed {seed}: {orders} orders per client, {rate} a second. Per order: register\n\
         the payment (keyed write), read the order (read), update the customer's profile (unkeyed\n\
         write that sends a notification).\n\n\
         gateway  a fresh one on 127.0.0.1 per client, the same faults from the seed for both:\n         \
         payments applied then answered 500, connections dropped before and after applying,\n         \
         answers slower than the {attempt} attempt timeout, {declined} orders declined with 422,\n         \
         an outage (every request 503) from {from} to {to}\n\
         naive    plain reqwest, no Idempotency-Key, every error retried 3 times {delay} apart\n\
         ballast  HttpSystem \"gateway\": retry 3 attempts, backoff {b0}..{b1} -> breaker 50 % of 20,\n         \
         probe after {half} -> bulkhead 8 -> timeout {attempt} aggressive, {total} total;\n         \
         worst-case in-memory window {window} < outage {outage}: the durable queue takes over (R-RES-RE-4)\n\
         queue    {db_url} ({kept}), worker polling every {poll}\n",
        seed = args.seed,
        orders = workload.orders,
        rate = pace.rate,
        attempt = ms(timings.attempt),
        from = s(plan.outage_start),
        to = s(plan.outage_start + plan.outage_len),
        delay = ms(pace.naive_delay),
        b0 = ms(timings.backoff),
        b1 = ms(timings.backoff_cap),
        half = s(timings.half_open_after),
        total = s(timings.total),
        window = s(window),
        outage = s(plan.outage_len),
        poll = ms(timings.poll),
    ))
}

async fn run_naive(
    workload: &Workload,
    plan: FaultPlan,
    pace: &Pace,
    timings: &Timings,
) -> anyhow::Result<Column> {
    let gateway = FlakyGateway::start(&workload.run, plan).await.context("cannot start the gateway")?;
    let started = Instant::now();
    let client = Arc::new(Naive::new(gateway.url(), workload.clone(), timings.attempt, pace.naive_delay)?);
    let bar = progress::client_bar("naive", workload.orders);
    workload.drive(&bar, &client).await;
    let wall = started.elapsed();
    bar.finish_with_message("done");
    settle(&plan, timings).await;
    Ok(Column { totals: gateway.totals(), queue: None, wall })
}

async fn run_ballast(
    workload: &Workload,
    plan: FaultPlan,
    pace: &Pace,
    timings: &Timings,
    queue: Queue,
    seed: u64,
) -> anyhow::Result<Column> {
    let gateway = FlakyGateway::start(&workload.run, plan).await.context("cannot start the gateway")?;
    let started = Instant::now();
    let client = Arc::new(Guarded::start(&gateway.url(), queue, workload.clone(), timings, seed)?);
    let bar = progress::client_bar("ballast", workload.orders);
    workload.drive(&bar, &client).await;
    let client = Arc::into_inner(client).context("an order still holds the client after the run")?;
    let queue = client
        .finish(pace.drain_limit, |left| {
            bar.set_message(format!("worker delivering {left} deferred payments"))
        })
        .await?;
    let wall = started.elapsed();
    bar.finish_with_message(format!("done, {} payments delivered by the worker", queue.delivered));
    settle(&plan, timings).await;
    Ok(Column { totals: gateway.totals(), queue: Some(queue), wall })
}

/// Waits until requests a client abandoned on its attempt timeout have been
/// applied, so the ledger is final.
async fn settle(plan: &FaultPlan, timings: &Timings) {
    tokio::time::sleep(plan.slow.saturating_sub(timings.attempt) + Duration::from_millis(50)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outage_outlasts_the_in_memory_window() {
        let window = Timings::DEMO.policy(1).unwrap().worst_case();
        for pace in [Pace::FULL, Pace::QUICK] {
            assert!(pace.outage > window, "{:?} <= {window:?}", pace.outage);
        }
    }
}
