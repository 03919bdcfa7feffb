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

/// The shortest median first delay a backoff may have (R-RES-RE-X3).
///
/// Why 100 ms: the blips in-memory retry is for — a dropped connection, a
/// fail-over, a pause of the other side — last tens to hundreds of
/// milliseconds, so an earlier retry lands in the same blip; and jitter that
/// spreads clients over less than a typical round trip does not spread them
/// at all. It is also where the common SDKs start (AWS SDKs: 100 ms,
/// cockatiel: 128 ms); the guide's own value is 500 ms.
pub const MIN_FIRST_DELAY: Duration = Duration::from_millis(100);

/// `max_delay` must be at least this many times the first delay
/// (R-RES-RE-X3): a cap at the first delay turns the backoff into a constant
/// delay, and under twice the first delay the waits can neither grow nor be
/// spread by jitter.
pub const MIN_GROWTH: u32 = 2;

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
/// The default median first delay is [`Backoff::DEFAULT_FIRST_DELAY`] (500 ms),
/// so a default policy waits roughly 500 ms → 1 s → 2 s.
///
/// Two limits keep a backoff from degrading into hammering or a constant
/// delay, checked when a policy is built and by `ballast lint`
/// (R-RES-RE-X3): the median first delay is at least [`MIN_FIRST_DELAY`]
/// (100 ms), and `max_delay` at least [`MIN_GROWTH`] (2) × the first delay.
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
    /// Decorrelated jitter from [`Backoff::DEFAULT_FIRST_DELAY`], capped at
    /// [`Backoff::DEFAULT_MAX_DELAY`].
    fn default() -> Self {
        Self::exponential(Self::DEFAULT_FIRST_DELAY)
    }
}

impl Backoff {
    /// The median first delay of the default backoff: the guide's 500 ms.
    pub const DEFAULT_FIRST_DELAY: Duration = Duration::from_millis(500);

    /// The cap on every delay unless [`max_delay`](Backoff::max_delay) sets another: 30 s.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(30);

    /// Exponential backoff with decorrelated jitter, whose first delay has the
    /// median `median_first`. The cap defaults to [`Backoff::DEFAULT_MAX_DELAY`].
    pub const fn exponential(median_first: Duration) -> Self {
        Self { shape: Shape::DecorrelatedJitter, median_first, max_delay: Self::DEFAULT_MAX_DELAY }
    }

    /// Exponential backoff with full jitter: delay `n` is uniform in
    /// `[0, 2 · median_first · 2ⁿ]`, so its median is `median_first · 2ⁿ`.
    pub const fn exponential_full_jitter(median_first: Duration) -> Self {
        Self { shape: Shape::FullJitter, median_first, max_delay: Self::DEFAULT_MAX_DELAY }
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

    /// Adds a finding for every way this backoff would retry too early or at
    /// a constant pace (R-RES-RE-X3): a first delay under
    /// [`MIN_FIRST_DELAY`], or a `max_delay` under [`MIN_GROWTH`] × the first
    /// delay. `first` and `max` name the two settings in the findings.
    pub(crate) fn check(&self, first: &'static str, max: &'static str, out: &mut Vec<Violation>) {
        let (m, cap, guide) = (self.median_first, self.max_delay, Self::DEFAULT_FIRST_DELAY);
        let mut x3 = |setting, message: String, help: String| {
            out.push(Violation::error(Some(Rule::ReX3), setting, message, help));
        };
        if m.is_zero() {
            x3(
                first,
                "the first delay is zero: retrying without backoff hammers a sick system".into(),
                format!("use a median first delay such as {guide:?} (the guide's value)"),
            );
        } else if m < MIN_FIRST_DELAY {
            x3(
                first,
                format!(
                    "the first delay {m:?} is under the {MIN_FIRST_DELAY:?} floor: the retries land in the \
                     same blip and their jitter is too narrow to spread the clients apart"
                ),
                format!("use a median first delay of at least {MIN_FIRST_DELAY:?}; the guide's is {guide:?}"),
            );
        }
        if cap.is_zero() {
            x3(
                max,
                "max_delay is zero: every retry would be immediate".into(),
                "cap the delay at a few seconds, e.g. 2 s".into(),
            );
        } else if !m.is_zero() && cap < m.saturating_mul(MIN_GROWTH) {
            let least = m.saturating_mul(MIN_GROWTH);
            x3(
                max,
                format!(
                    "max_delay {cap:?} is under {MIN_GROWTH} × the first delay {m:?}: the waits cannot grow \
                     or spread, so the backoff degrades to a constant delay"
                ),
                format!("set max_delay to at least {least:?} ({MIN_GROWTH} × the first delay); 4 × or more is typical"),
            );
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

    fn findings(b: Backoff) -> Vec<Violation> {
        let mut out = Vec::new();
        b.check("retry.first_delay", "retry.max_delay", &mut out);
        out
    }

    #[test]
    fn zero_first_delay_or_cap_is_refused_with_x3() {
        let zero_first = findings(Backoff::exponential(Duration::ZERO));
        assert_eq!(zero_first.len(), 1);
        assert_eq!(zero_first[0].setting, "retry.first_delay");
        let zero_cap = findings(Backoff::exponential(Duration::from_millis(500)).max_delay(Duration::ZERO));
        assert_eq!(zero_cap.len(), 1);
        assert_eq!(zero_cap[0].setting, "retry.max_delay");
        assert!(zero_first.iter().chain(&zero_cap).all(|v| v.rule == Some(Rule::ReX3)));
    }

    #[test]
    fn a_first_delay_under_the_floor_is_refused_with_x3() {
        for tiny in
            [Duration::from_nanos(1), Duration::from_millis(1), MIN_FIRST_DELAY - Duration::from_nanos(1)]
        {
            let out = findings(Backoff::exponential(tiny).max_delay(Duration::from_secs(2)));
            assert_eq!(out.len(), 1, "{tiny:?}: {out:?}");
            assert_eq!((out[0].rule, out[0].setting), (Some(Rule::ReX3), "retry.first_delay"));
            assert!(out[0].message.contains("floor"), "{}", out[0].message);
        }
        assert!(findings(Backoff::exponential(MIN_FIRST_DELAY).max_delay(Duration::from_secs(2))).is_empty());
    }

    #[test]
    fn a_cap_that_leaves_no_room_to_grow_is_a_constant_delay_and_refused() {
        let half = Duration::from_millis(500);
        for cap in [Duration::from_nanos(1), half, half * 2 - Duration::from_nanos(1)] {
            let out = findings(Backoff::exponential(half).max_delay(cap));
            assert_eq!(out.len(), 1, "{cap:?}: {out:?}");
            assert_eq!((out[0].rule, out[0].setting), (Some(Rule::ReX3), "retry.max_delay"));
        }
        assert!(findings(Backoff::exponential(half).max_delay(half * 2)).is_empty());
        assert!(findings(Backoff::exponential_full_jitter(half).max_delay(half * 2)).is_empty());
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
