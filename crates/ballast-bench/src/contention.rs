//! Contention: the guide's full policy called back to back from several
//! worker threads of one multi-thread tokio runtime, either all through one
//! shared policy (what a service does: one policy per external system) or
//! each task through a policy of its own (the baseline with nothing shared).
//!
//! Each configuration runs for a fixed number of calls split evenly over one
//! task per worker thread; the figure is calls per second of wall time.
//! Configurations are measured in rounds, each round running every
//! configuration once, so that load from other processes falls on all of them
//! alike, and the median round is reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

use ballast::Policy;

use crate::policies::{ballast_full, ballast_full_rate_limited};

/// Whether the tasks of a run share one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// Every task calls through clones of one policy (shared breaker,
    /// bulkhead and budget).
    Shared,
    /// Every task has a policy of its own.
    PerTask,
}

impl Sharing {
    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            Sharing::Shared => "one shared policy",
            Sharing::PerTask => "a policy per thread",
        }
    }
}

/// Calls a task makes between two yields, so that the runtime can spread
/// the tasks over its workers.
const YIELD_EVERY: u64 = 1024;

/// A multi-thread runtime with `threads` workers.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_time()
        .build()
        .expect("a runtime")
}

/// Which policy the tasks call through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContendedPolicy {
    /// The guide's: retry → count breaker → bulkhead 8 → timeout.
    Guide,
    /// The guide's with a rate limit that never refuses: one shared
    /// arrival time every attempt advances.
    GuideRateLimited,
}

impl ContendedPolicy {
    /// The table's label.
    pub fn label(self) -> &'static str {
        match self {
            ContendedPolicy::Guide => "the guide's",
            ContendedPolicy::GuideRateLimited => "the guide's + rate limit",
        }
    }

    fn policy(self) -> Policy {
        match self {
            ContendedPolicy::Guide => ballast_full(),
            ContendedPolicy::GuideRateLimited => ballast_full_rate_limited(),
        }
    }
}

/// The policies `threads` tasks use: clones of one, or one each.
pub fn policies(threads: usize, sharing: Sharing, stack: ContendedPolicy) -> Vec<Policy> {
    match sharing {
        Sharing::Shared => vec![stack.policy(); threads],
        Sharing::PerTask => (0..threads).map(|_| stack.policy()).collect(),
    }
}

/// Wall time of `calls` successful calls split over one task per policy on
/// `rt`. Every task starts before the clock does and waits at a barrier.
pub fn run(rt: &tokio::runtime::Runtime, policies: &[Policy], calls: u64) -> Duration {
    let n = policies.len() as u64;
    let start_line = std::sync::Arc::new(tokio::sync::Barrier::new(policies.len() + 1));
    let tasks: Vec<_> = policies
        .iter()
        .enumerate()
        .map(|(i, policy)| {
            let policy = policy.clone();
            let start_line = start_line.clone();
            let calls = calls / n + u64::from((i as u64) < calls % n);
            rt.spawn(async move {
                start_line.wait().await;
                for c in 0..calls {
                    let r = policy.read(|_| async { Ok::<u32, std::io::Error>(1) }).await;
                    assert_eq!(black_box(r.ok()), Some(1), "the success path failed");
                    if c % YIELD_EVERY == YIELD_EVERY - 1 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    rt.block_on(async {
        start_line.wait().await;
        let start = Instant::now();
        for t in tasks {
            t.await.expect("a bench task");
        }
        start.elapsed()
    })
}

/// Calls per second of `calls` calls taking `elapsed`.
pub fn per_sec(calls: u64, elapsed: Duration) -> f64 {
    calls as f64 / elapsed.as_secs_f64()
}

/// The median of `v` (sorted in place); 0 when empty.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_makes_its_calls() {
        for threads in [1, 2] {
            let rt = runtime(threads);
            for (sharing, stack) in [
                (Sharing::Shared, ContendedPolicy::Guide),
                (Sharing::PerTask, ContendedPolicy::GuideRateLimited),
            ] {
                let ps = policies(threads, sharing, stack);
                assert!(run(&rt, &ps, 1000) > Duration::ZERO);
                assert_eq!(ps[0].bulkhead_in_flight(), Some(0), "every slot given back");
            }
        }
    }
}
