//! Opens when the failures among the last `size` outcomes exceed a share of
//! them (cockatiel's `CountBreaker`; the guide: 50 % of the last 50 calls).
//!
//! The window is a ring of bits updated with atomics, so recording needs no
//! lock and no clock: slot `i mod size` holds outcome `i`, and the failure
//! count changes only with a bit that actually flips, which keeps it equal to
//! the number of set bits whatever the interleaving.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

#[derive(Debug)]
pub(crate) struct CountWindow {
    threshold: f64,
    size: usize,
    min_calls: usize,
    bits: Box<[AtomicU64]>,
    next: AtomicU64,
    failures: AtomicUsize,
}

impl CountWindow {
    pub(crate) fn new(threshold: f64, size: usize, min_calls: usize) -> Self {
        let words = size.div_ceil(64).max(1);
        Self {
            threshold,
            size: size.max(1),
            min_calls,
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            next: AtomicU64::new(0),
            failures: AtomicUsize::new(0),
        }
    }

    /// Records an outcome; true when the breaker should open.
    #[inline]
    pub(crate) fn record(&self, failure: bool) -> bool {
        let i = self.next.fetch_add(1, Ordering::AcqRel);
        let slot = (i % self.size as u64) as usize;
        let word = &self.bits[slot / 64];
        let mask = 1u64 << (slot % 64);
        if failure {
            let was = word.fetch_or(mask, Ordering::AcqRel) & mask != 0;
            let failures = if was {
                self.failures.load(Ordering::Acquire)
            } else {
                self.failures.fetch_add(1, Ordering::AcqRel) + 1
            };
            let total = (i + 1).min(self.size as u64) as usize;
            total >= self.min_calls && failures as f64 > self.threshold * total as f64
        } else {
            if word.load(Ordering::Relaxed) & mask != 0 && word.fetch_and(!mask, Ordering::AcqRel) & mask != 0
            {
                self.failures.fetch_sub(1, Ordering::AcqRel);
            }
            false
        }
    }

    pub(crate) fn reset(&self) {
        self.next.store(0, Ordering::Release);
        for word in self.bits.iter() {
            let cleared = word.swap(0, Ordering::AcqRel).count_ones() as usize;
            if cleared > 0 {
                self.failures.fetch_sub(cleared, Ordering::AcqRel);
            }
        }
    }
}
