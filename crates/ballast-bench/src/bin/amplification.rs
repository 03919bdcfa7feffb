//! Prints the amplification table of BENCHMARKS.md.
//!
//! `cargo run --release -p ballast-bench --bin amplification -- [--rate 100] [--seconds 120] [--seed 1]`

use std::time::Duration;

use ballast_bench::amplification::{simulate, Client, Scenario};
use clap::Parser;

/// Load on a sick upstream: offered calls vs attempts that reach it.
#[derive(Parser, Debug)]
struct Args {
    /// Calls offered per second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Simulated seconds of traffic.
    #[arg(long, default_value_t = 120)]
    seconds: u64,
    /// Seed of the upstream's errors and of the jitter.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() {
    let args = Args::parse();
    let duration = Duration::from_secs(args.seconds);
    println!("{} calls/s for {} s (paused clock, seed {})\n", args.rate, args.seconds, args.seed);
    println!("| scenario | client | offered | attempts | load factor | success rate |");
    println!("|---|---|---|---|---|---|");
    for (name, scenario) in Scenario::standard() {
        for client in Client::ALL {
            let o = simulate(client, scenario, args.rate, duration, args.seed);
            println!(
                "| {name} | {} | {} | {} | {:.2}× | {:.1} % |",
                client.label(),
                o.offered,
                o.attempts,
                o.load_factor(),
                100.0 * o.success_rate()
            );
        }
    }
}
