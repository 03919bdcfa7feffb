//! Jittered exponential backoff, the only kind there is (R-RES-RE-X3).
//!
//! A constant delay, or none, makes every client of a sick system come back
//! at the same moment and doubles the load on it. So there is no constant or
//! zero backoff type: only two jittered exponential ones.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::rules::{Rule, Violation};

/// Scales the decorrelated-jitter formula so that the median of the first
/// delay is the configured median first delay (Polly's `RpScalingFactor`).
const RP_SCALING: f64 = 1.0 / 1.4;
/// The formula's `pFactor`.
const P_FACTOR: f64 = 4.0;
/// Past this exponent `2^t` stops mattering: every delay is at the cap.
const MAX_EXPONENT: f64 = 60.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    DecorrelatedJitter,
    FullJitter,
}

/// A jittered exponential backoff: roughly `median_first · 2ⁿ` before retry
/// `n + 1`, spread at random so that many instances don't retry in lock-step,
/// and never more than `max_delay`.
///
/// The default, [`Backoff::exponential`], is the decorrelated-jitter "V2"
/// formula that cockatiel's `ExponentialBackoff` and Polly use: with
/// `f(t) = 2ᵗ · tanh(√(4t))` and `tₖ = k + U(0,1)`, a wait is
/// `(f(tₖ) − f(tₖ₋₁)) / 1.4 · median_first`. ballast starts the sequence one
/// step in (the wait before retry `n + 1` uses `k = n + 1`): the formula's own
/// first two waits both have a median near `median_first`, while from `k = 1`
/// on each median doubles, so the median of wait `n` is ≈ `median_first · 2ⁿ`.
/// The default median first delay is 500 ms, so a default policy waits
/// roughly 500 ms → 1 s → 2 s.
///
/// ```
/// use std::time::Duration;
/// use ballast::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::from_secs(2));
/// for delay in backoff.delays(7).take(4) {
///     assert!(delay <= Duration::from_secs(2));
/// }
/// // The worst case of each wait, for planning the in-memory window (R-RES-RE-4):
/// assert!(backoff.bounds(0).max < Duration::from_millis(1500));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    shape: Shape,
    median_first: Duration,
    max_delay: Duration,
}

/// The least, median and greatest delay a backoff can choose for one wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayBounds {
    /// Shortest possible delay.
    pub min: Duration,
    /// Median delay.
    pub median: Duration,
    /// Longest possible delay (what worst-case windows add up).
    pub max: Duration,
}

impl Default for Backoff {
    /// Decorrelated jitter, 500 ms median first delay, 30 s cap.
    fn default() -> Self {
        Self::exponential(Duration::from_millis(500))
    }
}

impl Backoff {
    /// Exponential backoff with decorrelated jitter, whose first delay has the
    /// median `median_first`. The cap defaults to 30 s.
    pub const fn exponential(median_first: Duration) -> Self {
        Self { shape: Shape::DecorrelatedJitter, median_first, max_delay: Duration::from_secs(30) }
    }

    /// Exponential backoff with full jitter: delay `n` is uniform in
    /// `[0, 2 · median_first · 2ⁿ]`, so its median is `median_first · 2ⁿ`.
    pub const fn exponential_full_jitter(median_first: Duration) -> Self {
        Self { shape: Shape::FullJitter, median_first, max_delay: Duration::from_secs(30) }
    }

    /// Caps every delay at `max_delay`.
    pub const fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// The median first delay.
    pub fn median_first(&self) -> Duration {
        self.median_first
    }

    /// The cap on every delay.
    pub fn cap(&self) -> Duration {
        self.max_delay
    }

    /// Whether this is the full-jitter variant.
    pub fn is_full_jitter(&self) -> bool {
        self.shape == Shape::FullJitter
    }

    /// The delays before retry 1, 2, 3, …, drawn from a generator seeded with `seed`.
    pub fn delays(&self, seed: u64) -> Delays {
        let mut rng = SmallRng::seed_from_u64(seed);
        let prev = formula(rng.random::<f64>());
        Delays { backoff: *self, n: 0, prev, rng }
    }

    /// The range of the delay before retry `n + 1` (`n = 0` is the first wait).
    pub fn bounds(&self, n: u32) -> DelayBounds {
        let m = self.median_first.as_secs_f64();
        let n_f = f64::from(n);
        let max = match self.shape {
            Shape::DecorrelatedJitter => (formula(n_f + 2.0) - formula(n_f)) * RP_SCALING * m,
            Shape::FullJitter => 2.0 * m * exp2(n_f),
        };
        DelayBounds { min: Duration::ZERO, median: self.clamp(m * exp2(n_f)), max: self.clamp(max) }
    }

    pub(crate) fn check(&self, setting: &'static str, out: &mut Vec<Violation>) {
        if self.median_first.is_zero() {
            out.push(Violation::error(
                Some(Rule::ReX3),
                setting,
                "the first delay is zero: retrying without backoff hammers a sick system".into(),
                "use a median first delay such as 500 ms",
            ));
        }
        if self.max_delay.is_zero() {
            out.push(Violation::error(
                Some(Rule::ReX3),
                setting,
                "max_delay is zero: every retry would be immediate".into(),
                "cap the delay at a few seconds, e.g. 2 s",
            ));
        }
    }

    fn clamp(&self, secs: f64) -> Duration {
        if !secs.is_finite() || secs >= self.max_delay.as_secs_f64() {
            self.max_delay
        } else {
            Duration::from_secs_f64(secs.max(0.0))
        }
    }
}

fn exp2(x: f64) -> f64 {
    x.min(MAX_EXPONENT).exp2()
}

/// `f(t) = 2ᵗ · tanh(√(4t))`, increasing in `t`.
fn formula(t: f64) -> f64 {
    exp2(t) * (P_FACTOR * t).sqrt().tanh()
}

/// The successive delays of one call; see [`Backoff::delays`].
#[derive(Debug, Clone)]
pub struct Delays {
    backoff: Backoff,
    n: u32,
    prev: f64,
    rng: SmallRng,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let m = self.backoff.median_first.as_secs_f64();
        let u: f64 = self.rng.random();
        let n = f64::from(self.n);
        let secs = match self.backoff.shape {
            Shape::DecorrelatedJitter => {
                let next = formula(n + 1.0 + u);
                let delay = (next - self.prev) * RP_SCALING * m;
                self.prev = next;
                delay
            }
            Shape::FullJitter => u * 2.0 * m * exp2(n),
        };
        self.n = self.n.saturating_add(1);
        Some(self.backoff.clamp(secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn median(mut xs: Vec<Duration>) -> Duration {
        xs.sort();
        xs[xs.len() / 2]
    }

    #[test]
    fn default_policy_waits_roughly_half_a_second_then_one_then_two() {
        let b = Backoff::default();
        for (n, expect_ms) in [(0u32, 500.0), (1, 1000.0), (2, 2000.0)] {
            let samples: Vec<Duration> =
                (0..4001u64).map(|seed| b.delays(seed).nth(n as usize).unwrap()).collect();
            let got = median(samples).as_secs_f64() * 1000.0;
            assert!((got - expect_ms).abs() <= expect_ms * 0.25, "delay {n}: median {got} ms");
        }
    }

    #[test]
    fn same_seed_same_delays() {
        let b = Backoff::default();
        let a: Vec<_> = b.delays(42).take(5).collect();
        let c: Vec<_> = b.delays(42).take(5).collect();
        assert_eq!(a, c);
        let d: Vec<_> = b.delays(43).take(5).collect();
        assert_ne!(a, d);
    }

    #[test]
    fn zero_first_delay_or_cap_is_refused_with_x3() {
        let mut out = Vec::new();
        Backoff::exponential(Duration::ZERO).check("retry.first_delay", &mut out);
        Backoff::exponential(Duration::from_millis(1))
            .max_delay(Duration::ZERO)
            .check("retry.max_delay", &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|v| v.rule == Some(Rule::ReX3)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_delay_lies_within_zero_and_the_cap_and_its_bounds(
            seed in any::<u64>(),
            first_ms in 1u64..5_000,
            cap_ms in 1u64..120_000,
            full in any::<bool>(),
        ) {
            let first = Duration::from_millis(first_ms);
            let b = if full { Backoff::exponential_full_jitter(first) } else { Backoff::exponential(first) }
                .max_delay(Duration::from_millis(cap_ms));
            for (n, d) in b.delays(seed).take(12).enumerate() {
                prop_assert!(d <= b.cap());
                let bounds = b.bounds(n as u32);
                prop_assert!(d >= bounds.min && d <= bounds.max + Duration::from_micros(1), "delay {n} = {d:?} outside {bounds:?}");
            }
        }

        #[test]
        fn median_of_delay_n_doubles_until_the_cap(
            seed in any::<u64>(),
            first_ms in 10u64..2_000,
            full in any::<bool>(),
        ) {
            let first = Duration::from_millis(first_ms);
            let cap = first * 16;
            let b = if full { Backoff::exponential_full_jitter(first) } else { Backoff::exponential(first) }.max_delay(cap);
            for n in 0..4u32 {
                let expected = first.as_secs_f64() * f64::from(1u32 << n);
                let samples: Vec<Duration> = (0..1501u64)
                    .map(|i| b.delays(seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15))).nth(n as usize).unwrap())
                    .collect();
                let got = median(samples).as_secs_f64();
                prop_assert!((got - expected).abs() <= expected * 0.25, "delay {n}: median {got} vs {expected}");
            }
        }
    }
}
