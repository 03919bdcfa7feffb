//! Model-based tests: each breaker against a small reference model, fed
//! random sequences of outcomes and clock advances on a paused clock.
//!
//! Cases default to 1,000 per breaker kind; set `BALLAST_MODEL_CASES` for more.

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::events::Emitter;

#[derive(Debug, Clone)]
enum Op {
    Call { fail: bool },
    Advance(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum ModelState {
    Closed,
    Open { until: Duration },
    HalfOpen { taken: u32, ok: u32 },
}

/// The reference: the documented semantics, written the plain way.
struct Model {
    cfg: Breaker,
    wait: Duration,
    state: ModelState,
    last: VecDeque<bool>,
    in_a_row: u32,
    samples: Vec<(Duration, bool)>,
}

impl Model {
    fn new(cfg: Breaker, wait: Duration) -> Self {
        Self { cfg, wait, state: ModelState::Closed, last: VecDeque::new(), in_a_row: 0, samples: Vec::new() }
    }

    /// Returns whether the call was admitted.
    fn call(&mut self, now: Duration, fail: bool) -> bool {
        match self.state {
            ModelState::Open { until } if now < until => return false,
            ModelState::Open { .. } => self.state = ModelState::HalfOpen { taken: 0, ok: 0 },
            _ => {}
        }
        match self.state {
            ModelState::HalfOpen { taken, ok } => {
                if taken >= self.cfg.probes {
                    return false;
                }
                if fail {
                    self.state = ModelState::Open { until: now + self.wait };
                } else if ok + 1 >= self.cfg.probes {
                    self.close();
                } else {
                    self.state = ModelState::HalfOpen { taken: taken + 1, ok: ok + 1 };
                }
                true
            }
            ModelState::Closed => {
                if self.record_closed(now, fail) {
                    self.state = ModelState::Open { until: now + self.wait };
                }
                true
            }
            ModelState::Open { .. } => unreachable!("moved to half-open above"),
        }
    }

    fn close(&mut self) {
        self.state = ModelState::Closed;
        self.last.clear();
        self.in_a_row = 0;
        self.samples.clear();
    }

    fn record_closed(&mut self, now: Duration, fail: bool) -> bool {
        match self.cfg.kind {
            Kind::Consecutive { n } => {
                self.in_a_row = if fail { self.in_a_row + 1 } else { 0 };
                fail && self.in_a_row >= n
            }
            Kind::Count { threshold, size, min_calls } => {
                self.last.push_back(fail);
                if self.last.len() > size {
                    self.last.pop_front();
                }
                let failures = self.last.iter().filter(|f| **f).count();
                let total = self.last.len();
                fail && total >= min_calls.unwrap_or(size) && failures as f64 > threshold * total as f64
            }
            Kind::Sampling { threshold, period, min_throughput } => {
                self.samples.push((now, fail));
                let bucket = (period / sampling::BUCKETS as u32).max(Duration::from_nanos(1));
                let epoch = |t: Duration| (t.as_nanos() / bucket.as_nanos()) as u64;
                let oldest = epoch(now).saturating_sub(sampling::BUCKETS - 1);
                let live: Vec<_> = self.samples.iter().filter(|(t, _)| epoch(*t) >= oldest).collect();
                let failures = live.iter().filter(|(_, f)| *f).count();
                fail && live.len() as u64 >= min_throughput && failures as f64 > threshold * live.len() as f64
            }
        }
    }

    fn state(&self) -> BreakerState {
        match self.state {
            ModelState::Closed => BreakerState::Closed,
            ModelState::Open { .. } => BreakerState::Open,
            ModelState::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

fn cases() -> u32 {
    std::env::var("BALLAST_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    (0.0f64..1.0).prop_flat_map(|p_fail| {
        prop::collection::vec(
            prop_oneof![
                7 => prop::bool::weighted(p_fail).prop_map(|fail| Op::Call { fail }),
                2 => (0u64..2_000).prop_map(|ms| Op::Advance(Duration::from_millis(ms))),
                1 => (2_000u64..20_000).prop_map(|ms| Op::Advance(Duration::from_millis(ms))),
            ],
            1..200,
        )
    })
}

fn threshold() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.2), Just(0.5), Just(0.8), Just(1.0)]
}

fn consecutive() -> impl Strategy<Value = Breaker> {
    (1u32..6).prop_map(Breaker::consecutive)
}

fn count() -> impl Strategy<Value = Breaker> {
    (threshold(), 1usize..80)
        .prop_flat_map(|(t, size)| (Just(t), Just(size), 1..=size))
        .prop_map(|(t, size, min)| Breaker::count(t, size).min_calls(min))
}

fn sampling() -> impl Strategy<Value = Breaker> {
    (threshold(), 1u64..10_000, 1u64..12)
        .prop_map(|(t, ms, min)| Breaker::sampling(t, Duration::from_millis(ms)).min_throughput(min))
}

fn run_against_model(cfg: Breaker, wait: Duration, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    rt.block_on(async move {
        let origin = Instant::now();
        let real = CircuitBreaker::new(cfg, Emitter::new("model".into(), Vec::new()), 0);
        let mut model = Model::new(cfg, wait);
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Advance(d) => tokio::time::advance(d).await,
                Op::Call { fail } => {
                    let now = Instant::now() - origin;
                    let expected = model.call(now, fail);
                    let admitted = match real.admit() {
                        Ok(a) => {
                            a.record(fail);
                            true
                        }
                        Err(_) => false,
                    };
                    prop_assert_eq!(admitted, expected, "step {}: admission differs", step);
                }
            }
            prop_assert_eq!(real.state(), model.state(), "step {}: state differs after {:?}", step, op);
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn consecutive_breaker_follows_the_reference_model(
        cfg in consecutive(), wait_ms in 1u64..10_000, probes in 1u32..4, ops in ops(),
    ) {
        let wait = Duration::from_millis(wait_ms);
        run_against_model(cfg.half_open_after(wait).probes(probes), wait, ops)?;
    }

    #[test]
    fn count_breaker_follows_the_reference_model(
        cfg in count(), wait_ms in 1u64..10_000, probes in 1u32..4, ops in ops(),
    ) {
        let wait = Duration::from_millis(wait_ms);
        run_against_model(cfg.half_open_after(wait).probes(probes), wait, ops)?;
    }

    #[test]
    fn sampling_breaker_follows_the_reference_model(
        cfg in sampling(), wait_ms in 1u64..10_000, probes in 1u32..4, ops in ops(),
    ) {
        let wait = Duration::from_millis(wait_ms);
        run_against_model(cfg.half_open_after(wait).probes(probes), wait, ops)?;
    }
}
