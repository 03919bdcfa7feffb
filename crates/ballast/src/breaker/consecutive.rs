//! Opens after `n` failures in a row.

use std::sync::atomic::{AtomicU32, Ordering};

/// Counts failures in a row with one atomic; a success clears it.
#[derive(Debug)]
pub(crate) struct Consecutive {
    threshold: u32,
    failures: AtomicU32,
}

impl Consecutive {
    pub(crate) fn new(threshold: u32) -> Self {
        Self { threshold, failures: AtomicU32::new(0) }
    }

    /// Records an outcome; true when the breaker should open.
    #[inline]
    pub(crate) fn record(&self, failure: bool) -> bool {
        if failure {
            self.failures.fetch_add(1, Ordering::AcqRel).saturating_add(1) >= self.threshold
        } else {
            // A load first keeps the success path free of cache-line writes.
            if self.failures.load(Ordering::Relaxed) != 0 {
                self.failures.store(0, Ordering::Release);
            }
            false
        }
    }

    pub(crate) fn reset(&self) {
        self.failures.store(0, Ordering::Release);
    }
}
