//! The failure path: time per call of an operation that fails with a
//! transient error on every attempt, retried to 3 attempts with exponential
//! backoff from 500 ms, through ballast, tower's retry and tower-resilience
//! (stacks in `ballast_bench::failure_path`), each on a current-thread tokio
//! runtime on the paused clock.
//!
//! `cargo bench -p ballast-bench --features peers --bench failure_path -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::time::Instant;

use ballast_bench::failure_path as fp;
use ballast_bench::success_path::Stack;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use tokio::runtime::Runtime;

/// `iters` calls in a row inside one `block_on`, timed from inside.
fn bench_stack<S: Stack>(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, mut stack: S) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    assert_eq!(black_box(stack.call().await), 0, "the failure path succeeded");
                }
                start.elapsed()
            })
        });
    });
}

fn stacks(c: &mut Criterion) {
    let rt = fp::paused_runtime();
    let mut group = c.benchmark_group("failure_path");
    bench_stack(
        &mut group,
        &rt,
        "ballast (guide stack without breaker)",
        fp::BallastFailing(fp::ballast_policy()),
    );
    bench_stack(&mut group, &rt, "tower retry", fp::Tower(fp::tower_stack()));
    bench_stack(&mut group, &rt, "tower-resilience 0.13", fp::Tower(fp::tower_resilience_stack()));
    group.finish();
}

criterion_group!(benches, stacks);
criterion_main!(benches);
