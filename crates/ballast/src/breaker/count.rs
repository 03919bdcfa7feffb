//! Opens when the failures among the last `size` outcomes exceed a share of
//! them (cockatiel's `CountBreaker`; the guide: 50 % of the last 50 calls).
//!
//! The window is a ring of bits updated with atomics, so recording needs no
//! lock and no clock: slot `i mod size` holds outcome `i`, and the failure
//! count changes only with a bit that actually flips, which keeps it equal to
//! the number of set bits whatever the interleaving.
//!
//! Successes enter the ring in batches. Each thread counts its successes on a
//! stripe of its own (see `stripe`) and moves them into the ring — one write
//! of the shared position for the whole batch — once it holds `batch` of
//! them, or at once when that thread records a failure. Without that, every
//! call on every core would write the shared position, and a shared policy
//! would not scale past one core.
//!
//! While the window is full and holds no failure — a healthy system — a
//! success is not written at all: it would clear a clear bit and move a
//! position that no outcome depends on while every bit is clear. That is
//! exact, and it leaves the healthy path with no shared write.
//!
//! What batching relaxes, and what it does not:
//! - A failure is recorded at once, after its own thread's pending successes,
//!   so on one thread (and so in the model tests) the window is exact.
//! - Across threads, the window a failure is judged on can lack the pending
//!   successes of the other stripes: at most `batch − 1` per stripe, `batch`
//!   being `size / 8` clamped to 1..=16 (6 for the guide's 50). Those
//!   successes count as slightly older or, when a thread stops calling,
//!   not at all; the ratio is off by at most that many outcomes of `size`.
//! - A system that fails every call still opens the breaker within one window
//!   of failures: a thread's first failure flushes its pending successes, so
//!   once every calling thread has failed once, nothing older is pending.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::stripe::{self, Padded};

#[derive(Debug)]
pub(crate) struct CountWindow {
    threshold: f64,
    size: usize,
    min_calls: usize,
    /// Successes a stripe collects before it moves them into the ring.
    batch: u32,
    bits: Box<[AtomicU64]>,
    /// The position of the next outcome: its own line, as every batch writes
    /// it (boxed, so the breaker itself stays small).
    next: Box<Padded<AtomicU64>>,
    failures: AtomicUsize,
    /// Successes not yet in the ring, per stripe; `len` is a power of two.
    pending: Box<[Padded<AtomicU32>]>,
}

impl CountWindow {
    pub(crate) fn new(threshold: f64, size: usize, min_calls: usize) -> Self {
        let words = size.div_ceil(64).max(1);
        Self {
            threshold,
            size: size.max(1),
            min_calls,
            batch: (size / 8).clamp(1, 16) as u32,
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            next: Box::new(Padded(AtomicU64::new(0))),
            failures: AtomicUsize::new(0),
            pending: stripe::padded(stripe::count(), || AtomicU32::new(0)),
        }
    }

    /// Records an outcome; true when the breaker should open.
    #[inline]
    pub(crate) fn record(&self, failure: bool) -> bool {
        if !failure
            && self.failures.load(Ordering::Relaxed) == 0
            && self.next.load(Ordering::Relaxed) >= self.size as u64
        {
            // A full window without failures: a success would write a clear
            // bit over a clear bit, and only move the position, which no
            // outcome depends on while every bit is clear. Skipping it is
            // exact, and leaves the healthy path without a shared write.
            return false;
        }
        let pending = &self.pending[stripe::thread_index() & (self.pending.len() - 1)];
        if !failure {
            if pending.fetch_add(1, Ordering::Relaxed) + 1 >= self.batch {
                self.flush(pending);
            }
            return false;
        }
        let successes = u64::from(pending.swap(0, Ordering::Relaxed));
        let first = self.next.fetch_add(successes + 1, Ordering::AcqRel);
        self.clear(first, successes);
        let i = first + successes;
        let (word, mask) = self.bit(i);
        let was = word.fetch_or(mask, Ordering::AcqRel) & mask != 0;
        let failures = if was {
            self.failures.load(Ordering::Acquire)
        } else {
            self.failures.fetch_add(1, Ordering::AcqRel) + 1
        };
        let total = (i + 1).min(self.size as u64) as usize;
        total >= self.min_calls && failures as f64 > self.threshold * total as f64
    }

    /// Moves a stripe's pending successes into the ring.
    #[cold]
    fn flush(&self, pending: &AtomicU32) {
        let successes = u64::from(pending.swap(0, Ordering::Relaxed));
        if successes > 0 {
            let first = self.next.fetch_add(successes, Ordering::AcqRel);
            self.clear(first, successes);
        }
    }

    /// Writes `n` successes at positions `first..first + n`. A load first, so
    /// a bit that is already clear (the usual case) is not written.
    fn clear(&self, first: u64, n: u64) {
        for i in first..first + n.min(self.size as u64) {
            let (word, mask) = self.bit(i);
            if word.load(Ordering::Relaxed) & mask != 0 && word.fetch_and(!mask, Ordering::AcqRel) & mask != 0
            {
                self.failures.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// The word and bit of position `i`.
    #[inline]
    fn bit(&self, i: u64) -> (&AtomicU64, u64) {
        let slot = (i % self.size as u64) as usize;
        (&self.bits[slot / 64], 1u64 << (slot % 64))
    }

    pub(crate) fn reset(&self) {
        for pending in self.pending.iter() {
            pending.store(0, Ordering::Relaxed);
        }
        self.next.store(0, Ordering::Release);
        for word in self.bits.iter() {
            let cleared = word.swap(0, Ordering::AcqRel).count_ones() as usize;
            if cleared > 0 {
                self.failures.fetch_sub(cleared, Ordering::AcqRel);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Barrier;

    use super::*;

    /// Threads that have each left successes pending start failing every
    /// call: the window opens within one window of failures (counting the
    /// failures other threads had started but not yet recorded).
    #[test]
    fn a_system_failing_on_every_thread_opens_within_one_window() {
        const THREADS: usize = 4;
        for size in [8, 50, 200] {
            let w = CountWindow::new(0.5, size, size);
            let started = AtomicUsize::new(0);
            let opened_after = AtomicUsize::new(usize::MAX);
            let open = AtomicBool::new(false);
            let failing = Barrier::new(THREADS);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (w, started, opened_after, open, failing) =
                        (&w, &started, &opened_after, &open, &failing);
                    s.spawn(move || {
                        // Successes that leave a different remainder pending on each stripe.
                        for _ in 0..size * 3 + t {
                            assert!(!w.record(false));
                        }
                        failing.wait();
                        while !open.load(Ordering::Acquire) {
                            let k = started.fetch_add(1, Ordering::AcqRel) + 1;
                            if w.record(true) {
                                opened_after.fetch_min(k, Ordering::AcqRel);
                                open.store(true, Ordering::Release);
                            }
                        }
                    });
                }
            });
            let n = opened_after.load(Ordering::Acquire);
            assert!(n <= size + THREADS, "window {size}: opened after {n} failures");
        }
    }
}
