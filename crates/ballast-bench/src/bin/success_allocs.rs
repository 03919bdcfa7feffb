//! Heap allocations per call on the success path, for every stack of the
//! `success_path` bench, as a markdown table, after the size of the future a
//! call through the guide's policy returns.
//!
//! `cargo run --release -p ballast-bench --no-default-features --features peers --bin success_allocs -- [--calls 100000] [--warm-up 10000] [--only LABEL]`
//!
//! A counting global allocator (`stats_alloc`, no unsafe code here) counts
//! every allocation of the process while the calls run, one after another on
//! a current-thread runtime; nothing else runs then.

use std::alloc::System;
use std::hint::black_box;

use ballast_bench::success_path::{Named, Stack};
use clap::Parser;
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};
use tokio::runtime::Runtime;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Heap allocations per call on the success path.
#[derive(Parser, Debug)]
struct Args {
    /// Calls counted per stack.
    #[arg(long, default_value_t = 100_000)]
    calls: u64,
    /// Calls made first and not counted.
    #[arg(long, default_value_t = 10_000)]
    warm_up: u64,
    /// Only the stack of this row label: with two `--calls` under
    /// `valgrind --tool=callgrind`, the difference in instructions over the
    /// difference in calls is one call's instruction count.
    #[arg(long)]
    only: Option<String>,
}

fn run<S: Stack>(rt: &Runtime, stack: &mut S, calls: u64) {
    rt.block_on(async {
        for _ in 0..calls {
            assert_eq!(black_box(stack.call().await), 1, "the success path failed");
        }
    });
}

fn measure<S: Stack>(rt: &Runtime, args: &Args, named: Named<S>) {
    let Named { name, contains, mut stack } = named;
    if args.only.as_ref().is_some_and(|only| only != name) {
        return;
    }
    run(rt, &mut stack, args.warm_up);
    let region = Region::new(GLOBAL);
    run(rt, &mut stack, args.calls);
    let change = region.change();
    let per_call = |n: usize| n as f64 / args.calls as f64;
    println!(
        "| {name} | {:.3} | {:.1} | {contains} |",
        per_call(change.allocations + change.reallocations),
        per_call(change.bytes_allocated),
    );
}

fn main() {
    let args = Args::parse();
    let rt = ballast_bench::success_path::runtime();
    println!("{} calls per stack after {} warm-up calls", args.calls, args.warm_up);
    println!(
        "the future of one call through the guide's policy: {} bytes\n",
        ballast_bench::success_path::ballast_full_call_size()
    );
    println!("| stack | allocs/call | bytes/call | contains |");
    println!("|---|---|---|---|");
    ballast_bench::for_each_stack!(named => measure(&rt, &args, named));
}
