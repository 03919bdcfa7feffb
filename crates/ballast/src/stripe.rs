//! Per-thread stripes of a counter, so that calls on different cores do not
//! write the same cache line.
//!
//! One policy is shared by every task of a service, on every core. A counter
//! every call writes (the budget's calls, the bulkhead's slots, the count
//! breaker's window position) moves its cache line from core to core on each
//! call, and that transfer, not the arithmetic, is what stops a shared policy
//! from scaling. So such counters are split into stripes, each on a cache
//! line of its own, and a thread writes the stripe of its own index. Threads
//! get consecutive indices as they first touch a stripe, so the workers of a
//! runtime land on different stripes as long as there are more stripes than
//! workers; the stripe count is a few times the core count for that reason.
//!
//! Which stripe a thread uses never matters for correctness: every reader
//! sums (or scans) all stripes. Only the cost changes.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A value on cache lines of its own. 128 bytes, not 64: x86 and recent ARM
/// cores fetch lines in adjacent pairs, so two 64-byte neighbours still
/// contend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The next index handed to a thread that has none yet.
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's index; `usize::MAX` until it first asks.
    static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's index: the same for the life of the thread, different
/// from the threads that asked before it.
#[inline]
pub(crate) fn thread_index() -> usize {
    INDEX.with(|index| {
        let i = index.get();
        if i != usize::MAX {
            return i;
        }
        let i = NEXT_INDEX.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        index.set(i);
        i
    })
}

/// How many stripes a striped counter has: four per core, as a power of two,
/// from 4 to 64. Four per core so that an oversubscribed runtime (more worker
/// threads than cores) still gives most workers a stripe of their own; at
/// most 64 so a counter stays within 8 KiB.
pub(crate) fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        (cores * 4).next_power_of_two().clamp(4, 64)
    })
}

/// `n` padded values made by `make`.
pub(crate) fn padded<T>(n: usize, make: impl FnMut() -> T) -> Box<[Padded<T>]> {
    std::iter::repeat_with(make).take(n).map(Padded).collect()
}
