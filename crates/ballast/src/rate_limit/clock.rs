//! The limiter's clock: nanoseconds since the limiter was made.
//!
//! A permit on the success path reads the clock once, and a precise
//! reading (`CLOCK_MONOTONIC`, through the vDSO) cost as much as the rest
//! of the permit. So the limiter reads the kernel's coarse monotonic clock
//! (`CLOCK_MONOTONIC_COARSE`: the same clock as of the last tick, 1–4 ms
//! ago, read without touching the time counter) and reads the precise one
//! only when a permit is not due on the coarse reading — a wait, a
//! refusal — where the tick could decide it
//! ([`Gcra::take`](super::gcra::Gcra::take)). The coarse reading is never
//! ahead of the precise one, so a permit it finds due is due; run on
//! readings up to a tick late, the limiter may let through one tick's worth
//! of the rate more in a window than the rate and the burst allow (0.4 of a
//! permit at 100/s with a 4 ms tick).
//!
//! With the `test-util` feature (as with tokio's own) both readings are
//! tokio's clock, which a test pauses and advances: the limiter is exact,
//! and its tests, and a user's, run on the paused clock.

use std::time::Duration;

/// Readings of the limiter's clock, in ns since it was made.
#[derive(Debug)]
pub(crate) struct Clock {
    #[cfg(feature = "test-util")]
    start: tokio::time::Instant,
    #[cfg(not(feature = "test-util"))]
    start: u64,
}

#[cfg(feature = "test-util")]
impl Clock {
    pub(crate) fn new() -> Self {
        Self { start: tokio::time::Instant::now() }
    }

    /// Now, on tokio's clock.
    pub(crate) fn coarse(&self) -> u64 {
        nanos(tokio::time::Instant::now().saturating_duration_since(self.start))
    }

    /// Now, on tokio's clock: as [`coarse`](Self::coarse).
    pub(crate) fn precise(&self) -> u64 {
        self.coarse()
    }
}

#[cfg(not(feature = "test-util"))]
impl Clock {
    pub(crate) fn new() -> Self {
        Self { start: monotonic::precise() }
    }

    /// Now as of the kernel's last tick.
    pub(crate) fn coarse(&self) -> u64 {
        monotonic::coarse().saturating_sub(self.start)
    }

    /// Now.
    pub(crate) fn precise(&self) -> u64 {
        monotonic::precise().saturating_sub(self.start)
    }
}

/// The kernel's monotonic clock, in ns since some point of its own.
#[cfg_attr(feature = "test-util", allow(dead_code))]
mod monotonic {
    /// As of its last tick.
    #[cfg(target_os = "linux")]
    #[inline]
    pub(crate) fn coarse() -> u64 {
        read(rustix::time::ClockId::MonotonicCoarse)
    }

    /// Now.
    #[cfg(target_os = "linux")]
    #[inline]
    pub(crate) fn precise() -> u64 {
        read(rustix::time::ClockId::Monotonic)
    }

    /// A clock every Linux has: its reading cannot fail.
    #[cfg(target_os = "linux")]
    #[inline]
    fn read(clock: rustix::time::ClockId) -> u64 {
        let t = rustix::time::clock_gettime(clock);
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        secs.saturating_mul(1_000_000_000).saturating_add(u64::try_from(t.tv_nsec).unwrap_or(0))
    }

    /// Elsewhere the standard monotonic clock, precise every time.
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn coarse() -> u64 {
        precise()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn precise() -> u64 {
        use std::sync::OnceLock;
        static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
        super::nanos(ORIGIN.get_or_init(std::time::Instant::now).elapsed())
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::monotonic;

    #[test]
    fn the_coarse_reading_is_never_ahead_of_the_precise_one_and_lags_at_most_a_tick() {
        let mut last = 0;
        for _ in 0..100_000 {
            let coarse = monotonic::coarse();
            let precise = monotonic::precise();
            assert!(coarse <= precise, "{coarse} > {precise}");
            assert!(precise - coarse <= 20_000_000, "a tick is at most 10 ms: {coarse} against {precise}");
            assert!(coarse >= last, "monotonic");
            last = coarse;
        }
    }
}
