//! The durable queue's schedule between a task's attempts: `2ⁿ s`, jittered
//! into the upper half, capped — the guide's durable retry (R-RES-RE-5).
//! Not to be confused with `ballast::Backoff`, the in-memory policy's
//! decorrelated jitter between the attempts of one call.

use std::time::Duration;

use rand::Rng;

/// Delay before a task's next attempt after a transient failure
/// (R-RES-RE-5: exponential, 2^n seconds; R-RES-RE-X3: always jittered).
///
/// After attempt `n` failed, the nominal delay is `base · 2^n`, capped at
/// `max_delay`; the actual delay is drawn uniformly from the upper half of
/// that, `[nominal / 2, nominal]`, so that tasks which failed together do not
/// come back together.
///
/// ```
/// use std::time::Duration;
/// use ballast_vocab::queue::DurableBackoff;
/// use rand::SeedableRng;
///
/// let backoff = DurableBackoff::default();
/// let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
/// let delay = backoff.delay(3, &mut rng);
/// assert!(delay >= Duration::from_secs(4) && delay <= Duration::from_secs(8));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct DurableBackoff {
    base: Duration,
    /// Caps the nominal delay.
    #[setters(generate)]
    max_delay: Duration,
}

impl Default for DurableBackoff {
    /// 2^n seconds, capped at one hour.
    fn default() -> Self {
        Self { base: Duration::from_secs(1), max_delay: Duration::from_secs(3600) }
    }
}

impl DurableBackoff {
    /// A backoff of `base · 2^n`, capped at one hour.
    pub fn exponential(base: Duration) -> Self {
        Self { base, ..Self::default() }
    }

    /// The nominal (un-jittered) delay after `attempt` failed attempts.
    pub fn nominal(&self, attempt: u32) -> Duration {
        let factor = 2u32.checked_pow(attempt).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max_delay)
    }

    /// The jittered delay after `attempt` failed attempts, drawn from `rng`.
    pub fn delay<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let nominal = self.nominal(attempt);
        let half = nominal / 2;
        half + (nominal - half).mul_f64(rng.random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn doubles_per_attempt_then_caps() {
        let b = DurableBackoff::default();
        assert_eq!(b.nominal(1), Duration::from_secs(2));
        assert_eq!(b.nominal(5), Duration::from_secs(32));
        assert_eq!(b.nominal(12), Duration::from_secs(3600));
        assert_eq!(b.nominal(200), Duration::from_secs(3600));
    }

    #[test]
    fn jitter_stays_in_the_upper_half_and_varies() {
        let b = DurableBackoff::default().max_delay(Duration::from_secs(60));
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for attempt in 0..20 {
            let n = b.nominal(attempt);
            let d = b.delay(attempt, &mut rng);
            assert!(d >= n / 2 && d <= n, "attempt {attempt}: {d:?} vs {n:?}");
        }
        let draws: Vec<_> = (0..10).map(|_| b.delay(4, &mut rng)).collect();
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
