//! Prints BENCHMARKS.md's "Fleet" table: a rate limit each replica holds
//! alone beside one a fleet of 1 and of 3 replicas holds on PostgreSQL, at a
//! steady pace — this process's CPU per permit, database round trips per
//! 1,000 permits, and the CPU PostgreSQL's backends spent.
//!
//! ```text
//! cargo run --release -p ballast-bench --bin fleet_bench -- --url postgres://postgres@127.0.0.1:5432/test
//! ```

use ballast_bench::fleet_bench::{run, FleetRun};
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// The PostgreSQL URL (the bench makes and drops a schema in it).
    #[arg(long)]
    url: String,
    /// Calls a second to each replica.
    #[arg(long, default_value_t = 5000)]
    per_replica: u32,
    /// Seconds each configuration runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let opts = FleetRun { url: args.url, per_replica: args.per_replica, seconds: args.seconds };
    let rows = runtime.block_on(run(&opts))?;
    println!("{} calls/s to each replica, {} s each\n", opts.per_replica, opts.seconds);
    println!("| limit | calls/s | CPU per permit | DB round trips per 1,000 permits | PostgreSQL CPU |");
    println!("|---|---|---|---|---|");
    // Each fleet beside the local limits of as many replicas, the row before it.
    let mut local = 1.0;
    for row in rows {
        let ns = row.cpu_per_permit.as_nanos() as f64;
        if row.name.ends_with("local") {
            local = ns.max(1.0);
        }
        println!(
            "| {} | {:.0} | {:.2} µs ({:.2}×) | {:.1} | {:.1} % of a core |",
            row.name,
            row.calls_per_second,
            ns / 1000.0,
            ns / local,
            row.round_trips_per_1000,
            row.pg_cpu_share * 100.0
        );
    }
    Ok(())
}
