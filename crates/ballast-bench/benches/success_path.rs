//! The success path: ns per call of an operation that returns `Ok(1)` at
//! once, through ballast and through its peers (stacks in
//! `ballast_bench::success_path`), each on a current-thread tokio runtime.
//! Then ballast's guide policy called from one thread vs two threads.
//!
//! `cargo bench -p ballast-bench --no-default-features --features peers --bench success_path -- --warm-up-time 1 --measurement-time 3`
//!
//! Heap allocations per call come from the `success_allocs` bin (a counting
//! global allocator does not belong in the timing harness).

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ballast::Policy;
use ballast_bench::success_path::{self as sp, Named, Stack};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use tokio::runtime::Runtime;

/// `iters` calls in a row inside one `block_on`, timed from inside.
fn bench_stack<S: Stack>(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, named: Named<S>) {
    let Named { name, mut stack, .. } = named;
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(stack.call().await);
                }
                start.elapsed()
            })
        });
    });
}

fn stacks(c: &mut Criterion) {
    let rt = sp::runtime();
    let mut group = c.benchmark_group("success_path");
    ballast_bench::for_each_stack!(named => bench_stack(&mut group, &rt, named));
    group.finish();
}

/// Wall time for `iters` calls of the guide's policy split evenly across one
/// thread per policy, each thread with its own current-thread runtime. The
/// clock starts once every thread has built its runtime.
fn calls_on_threads(policies: &[Policy], iters: u64) -> Duration {
    let n = policies.len() as u64;
    let start_line = Arc::new(Barrier::new(policies.len() + 1));
    std::thread::scope(|scope| {
        let handles: Vec<_> = policies
            .iter()
            .enumerate()
            .map(|(i, policy)| {
                let policy = policy.clone();
                let start_line = Arc::clone(&start_line);
                let calls = iters / n + u64::from((i as u64) < iters % n);
                scope.spawn(move || {
                    let rt = sp::runtime();
                    start_line.wait();
                    rt.block_on(async {
                        for _ in 0..calls {
                            black_box(policy.read(|_| async { Ok::<u32, std::io::Error>(1) }).await.ok());
                        }
                    });
                })
            })
            .collect();
        start_line.wait();
        let start = Instant::now();
        for h in handles {
            h.join().expect("a bench thread");
        }
        start.elapsed()
    })
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("ballast_full_threads");
    let shared = sp::ballast_full();
    group.bench_function("1 thread", |b| {
        b.iter_custom(|iters| calls_on_threads(std::slice::from_ref(&shared), iters))
    });
    group.bench_function("2 threads, one shared policy", |b| {
        b.iter_custom(|iters| calls_on_threads(&[shared.clone(), shared.clone()], iters))
    });
    group.bench_function("2 threads, a policy each", |b| {
        b.iter_custom(|iters| calls_on_threads(&[sp::ballast_full(), sp::ballast_full()], iters))
    });
    group.finish();
}

criterion_group!(benches, stacks, threads);
criterion_main!(benches);
