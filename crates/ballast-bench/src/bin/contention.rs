//! The contention table of BENCHMARKS.md: calls per second of the guide's
//! full policy, with and without a rate limit that never refuses, on a
//! multi-thread tokio runtime with 1, 2 and 8 worker threads, one shared
//! policy beside a policy per thread.
//!
//! `cargo run --release -p ballast-bench --no-default-features --bin contention -- [--calls 2000000] [--rounds 7]`
//!
//! Every round runs every configuration once (see
//! `ballast_bench::contention`); the median round of each is printed, with
//! its speed-up over the same sharing on one thread.

use ballast_bench::contention::{median, per_sec, policies, run, runtime, ContendedPolicy, Sharing};
use clap::Parser;

/// Calls per second of one shared policy vs a policy per thread.
#[derive(Parser, Debug)]
struct Args {
    /// Calls per configuration and round, split over the threads.
    #[arg(long, default_value_t = 2_000_000)]
    calls: u64,
    /// Rounds; the median is printed.
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Worker-thread counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 2, 8])]
    threads: Vec<usize>,
}

fn main() {
    let args = Args::parse();
    let configs: Vec<(ContendedPolicy, Sharing)> =
        [ContendedPolicy::Guide, ContendedPolicy::GuideRateLimited]
            .into_iter()
            .flat_map(|stack| [Sharing::Shared, Sharing::PerTask].map(|sharing| (stack, sharing)))
            .collect();
    let runtimes: Vec<_> = args.threads.iter().map(|&t| runtime(t)).collect();
    let mut samples = vec![vec![Vec::new(); configs.len()]; args.threads.len()];
    // Warm-up: every runtime's workers started, every code path hot.
    for (t, rt) in args.threads.iter().zip(&runtimes) {
        for &(stack, sharing) in &configs {
            run(rt, &policies(*t, sharing, stack), args.calls / 10);
        }
    }
    for _ in 0..args.rounds {
        for (i, (t, rt)) in args.threads.iter().zip(&runtimes).enumerate() {
            for (j, &(stack, sharing)) in configs.iter().enumerate() {
                let ps = policies(*t, sharing, stack);
                samples[i][j].push(per_sec(args.calls, run(rt, &ps, args.calls)));
            }
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "{} calls per configuration and round, median of {} rounds, {cores} cores\n",
        args.calls, args.rounds
    );
    println!(
        "| policy | worker threads | sharing | calls/s (median) | ns/call (wall ÷ calls) | × 1 thread, same sharing |"
    );
    println!("|---|---|---|---|---|---|");
    let medians: Vec<Vec<f64>> =
        samples.iter_mut().map(|row| row.iter_mut().map(|s| median(s)).collect()).collect();
    for (j, &(stack, sharing)) in configs.iter().enumerate() {
        for (i, t) in args.threads.iter().enumerate() {
            let rate = medians[i][j];
            println!(
                "| {} | {t} | {} | {:.2} M | {:.1} | {:.2}× |",
                stack.label(),
                sharing.label(),
                rate / 1e6,
                1e9 / rate,
                rate / medians[0][j],
            );
        }
    }
}
