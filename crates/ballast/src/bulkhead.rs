//! Bulkhead: at most `limit` attempts of one system in flight, plus a bounded
//! queue; anything over that is rejected at once ("system unavailable").
//!
//! It keeps one sick system from taking every task of the service: with the
//! guide's bulkhead of 8, the ninth concurrent call to a hanging gateway is
//! refused instead of piling up.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::rules::Violation;

/// Bulkhead settings: concurrent attempts and queue length.
///
/// ```
/// use ballast::Bulkhead;
/// let b = Bulkhead::new(8).queue(4); // 8 in flight, 4 more may wait
/// assert_eq!((b.limit(), b.queue_len()), (8, 4));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bulkhead {
    limit: usize,
    queue: usize,
}

impl Bulkhead {
    /// At most `limit` attempts in flight, none waiting.
    pub const fn new(limit: usize) -> Self {
        Self { limit, queue: 0 }
    }

    /// Lets up to `queue` attempts wait for a slot (default 0). Waiting respects
    /// the total deadline and cancellation.
    pub const fn queue(mut self, queue: usize) -> Self {
        self.queue = queue;
        self
    }

    /// The concurrency limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The queue length.
    pub fn queue_len(&self) -> usize {
        self.queue
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        if self.limit == 0 {
            out.push(Violation::error(
                None,
                "bulkhead.limit",
                "the bulkhead limit is 0: every call would be rejected".into(),
                "allow at least 1 concurrent call; the guide uses 8 for a payment gateway",
            ));
        }
    }
}

/// Why a slot was not had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Full,
    Deadline,
    Cancelled,
}

/// The running bulkhead shared by every call of one policy.
///
/// Slots are one atomic counter, so taking and giving back a slot is a
/// compare-and-swap and a subtraction; waiters in the queue are woken through
/// a [`Notify`] only when someone is actually waiting.
#[derive(Debug)]
pub(crate) struct BulkheadState {
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
    limit: usize,
    queue: usize,
}

/// A slot in the bulkhead, given back on drop.
#[derive(Debug)]
pub(crate) struct Slot<'a>(&'a BulkheadState);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        if self.0.waiting.load(Ordering::Acquire) > 0 {
            self.0.freed.notify_one();
        }
    }
}

impl BulkheadState {
    pub(crate) fn new(cfg: Bulkhead) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            limit: cfg.limit,
            queue: cfg.queue,
        }
    }

    /// The limit on attempts in flight.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Attempts in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// A slot if one is free right now.
    #[inline]
    pub(crate) fn try_acquire(&self) -> Option<Slot<'_>> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.limit).then_some(n + 1))
            .ok()
            .map(|_| Slot(self))
    }

    /// A slot after waiting in the queue, or why not. Call after
    /// [`try_acquire`](Self::try_acquire) failed.
    pub(crate) async fn wait(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Slot<'_>, Refused> {
        let admitted = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| (w < self.queue).then_some(w + 1))
            .is_ok();
        if !admitted {
            return Err(Refused::Full);
        }
        let _leave = LeaveQueue(&self.waiting);
        let deadline_passed = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let cancelled = async {
            match cancel {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let slot = async {
            loop {
                let freed = self.freed.notified();
                tokio::pin!(freed);
                // Registered before the retry, so a slot given back in between
                // still wakes us.
                freed.as_mut().enable();
                if let Some(slot) = self.try_acquire() {
                    return slot;
                }
                freed.await;
            }
        };
        tokio::select! {
            slot = slot => Ok(slot),
            () = deadline_passed => Err(Refused::Deadline),
            () = cancelled => Err(Refused::Cancelled),
        }
    }
}

/// Leaves the queue however the wait ends, dropped futures included.
struct LeaveQueue<'a>(&'a AtomicUsize);

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
