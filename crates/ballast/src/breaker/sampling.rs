//! Opens when failures exceed a share of the calls seen over a period of
//! time, once the period has seen a minimum number of calls.
//!
//! The period is cut into buckets; unlike the other breakers this one reads
//! the clock on every outcome, under a short lock.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Number of buckets a period is cut into.
pub(crate) const BUCKETS: u64 = 10;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    calls: u64,
    failures: u64,
}

#[derive(Debug)]
pub(crate) struct SamplingWindow {
    threshold: f64,
    min_throughput: u64,
    origin: Instant,
    bucket_len: Duration,
    buckets: Mutex<[Bucket; BUCKETS as usize]>,
}

impl SamplingWindow {
    pub(crate) fn new(threshold: f64, period: Duration, min_throughput: u64, origin: Instant) -> Self {
        Self {
            threshold,
            min_throughput,
            origin,
            bucket_len: (period / BUCKETS as u32).max(Duration::from_nanos(1)),
            buckets: Mutex::new([Bucket::default(); BUCKETS as usize]),
        }
    }

    /// Records an outcome at `now`; true when the breaker should open.
    pub(crate) fn record(&self, failure: bool, now: Instant) -> bool {
        let epoch = epoch_of(self.origin, self.bucket_len, now);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut buckets[(epoch % BUCKETS) as usize];
        if slot.epoch != epoch {
            *slot = Bucket { epoch, calls: 0, failures: 0 };
        }
        slot.calls += 1;
        slot.failures += u64::from(failure);
        if !failure {
            return false;
        }
        let oldest = epoch.saturating_sub(BUCKETS - 1);
        let (calls, failures) = buckets
            .iter()
            .filter(|b| b.epoch >= oldest && b.epoch <= epoch && b.calls > 0)
            .fold((0, 0), |(c, f), b| (c + b.calls, f + b.failures));
        calls >= self.min_throughput && failures as f64 > self.threshold * calls as f64
    }

    pub(crate) fn reset(&self) {
        *self.buckets.lock().unwrap_or_else(|e| e.into_inner()) = [Bucket::default(); BUCKETS as usize];
    }
}

/// The bucket `now` falls in, counted from `origin`.
pub(crate) fn epoch_of(origin: Instant, bucket_len: Duration, now: Instant) -> u64 {
    (now.saturating_duration_since(origin).as_nanos() / bucket_len.as_nanos().max(1)) as u64
}
