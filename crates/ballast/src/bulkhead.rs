//! Bulkhead: at most `limit` attempts of one system in flight, plus a bounded
//! queue; anything over that is rejected at once ("system unavailable").
//!
//! It keeps one sick system from taking every task of the service: with the
//! guide's bulkhead of 8, the ninth concurrent call to a hanging gateway is
//! refused instead of piling up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::rules::Violation;
use crate::stripe::{self, Padded};

/// Bulkhead settings: concurrent attempts and queue length.
///
/// The limit is exact: never more than `limit` attempts run at once. To keep
/// calls on different cores off each other's cache lines, the slots are dealt
/// out per thread, and a thread whose share is empty looks at the others one
/// after another; in a race with a finishing attempt a call can therefore be
/// refused (or queued) although a slot came free during that look — as if it
/// had arrived an instant earlier.
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
    /// The share of `limit` [background](crate::background) calls leave to live ones, in percent.
    reserve_live: u8,
}

/// The share of a bulkhead's slots kept for live calls unless configured.
pub const DEFAULT_RESERVE_LIVE: f64 = 0.25;

impl Bulkhead {
    /// At most `limit` attempts in flight, none waiting.
    pub const fn new(limit: usize) -> Self {
        Self { limit, queue: 0, reserve_live: 25 }
    }

    /// Keeps `share` (0.0–1.0, default [`DEFAULT_RESERVE_LIVE`]) of the slots
    /// for live calls: a [background](crate::background) call — a durable
    /// queue's delivery, which no caller waits for — waits for a slot
    /// instead of being refused, but takes one only while more than that
    /// share is free. At least one slot is always left to background
    /// calls, so a backlog drains even beside steady live traffic.
    ///
    /// ```
    /// use ballast::Bulkhead;
    /// assert_eq!(Bulkhead::new(8).reserved_for_live(), 2);
    /// assert_eq!(Bulkhead::new(8).reserve_live(0.5).reserved_for_live(), 4);
    /// assert_eq!(Bulkhead::new(1).reserved_for_live(), 0);
    /// ```
    pub fn reserve_live(mut self, share: f64) -> Self {
        let percent = if share.is_finite() { (share.clamp(0.0, 1.0) * 100.0).round() } else { 0.0 };
        self.reserve_live = percent as u8;
        self
    }

    /// The slots background calls leave free for live ones.
    pub fn reserved_for_live(&self) -> usize {
        let reserved = (self.limit as u128 * u128::from(self.reserve_live)).div_ceil(100);
        usize::try_from(reserved).unwrap_or(usize::MAX).min(self.limit.saturating_sub(1))
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
/// The `limit` slots are dealt out among stripes, each on a cache line of its
/// own (see `stripe`): a call takes a slot from its thread's stripe and gives
/// it back to the stripe of the thread it ends on (usually the same), so
/// calls on different cores never write the same line. Only when its stripe
/// is empty does a call look at the others. Slots move between stripes but
/// are never made or lost, so the limit holds exactly.
///
/// What is relaxed: a call is refused when it found every stripe empty as it
/// looked at them one after another. A slot given back to a stripe it had
/// already looked at is missed, so in a race with a finishing attempt a call
/// may be refused (or queued) although, at that moment, fewer than `limit`
/// attempts were in flight — as if it had arrived an instant earlier.
/// [`in_flight`](Self::in_flight) sums the stripes one after another and is
/// likewise a view, not a snapshot.
#[derive(Debug)]
pub(crate) struct BulkheadState {
    /// Free slots, per stripe; `len` is a power of two.
    free: Box<[Padded<AtomicUsize>]>,
    waiting: Padded<AtomicUsize>,
    freed: Notify,
    limit: usize,
    queue: usize,
    /// Background calls waiting for a slot (not bounded by `queue`).
    background: Padded<AtomicUsize>,
    /// Wakes every background waiter: each decides by the reserve.
    freed_background: Notify,
    /// Taken by a background call while it looks for room and takes a slot.
    background_take: std::sync::Mutex<()>,
    reserved: usize,
    /// Slots held past their limit ([`HeldSlot`] taken when none was free):
    /// the next slots given back pay them off instead of coming free.
    owed: Padded<AtomicUsize>,
}

/// A slot in the bulkhead, given back on drop to the stripe of the thread
/// that drops it: one pointer, as it sits in every call's future.
#[derive(Debug)]
pub(crate) struct Slot<'a>(&'a BulkheadState);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

/// A bulkhead slot held by work an attempt leaves running after it ends —
/// a streamed answer's body — until this is dropped
/// ([`Policy::hold_bulkhead_slot`](crate::Policy::hold_bulkhead_slot)):
/// 260 endless downloads through a bulkhead of 8 are 8 at a time, not 260.
#[derive(Debug)]
pub struct HeldSlot(Arc<BulkheadState>);

impl HeldSlot {
    /// A slot taken now whether or not one is free: taken inside an attempt,
    /// which gives its own back as it ends, so once it has the count is
    /// right again.
    pub(crate) fn take(state: &Arc<BulkheadState>) -> Self {
        if state.try_acquire().map(std::mem::forget).is_none() {
            state.owed.fetch_add(1, Ordering::SeqCst);
        }
        Self(Arc::clone(state))
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

impl BulkheadState {
    pub(crate) fn new(cfg: Bulkhead) -> Self {
        // No more stripes than slots, so that every stripe starts with one.
        let (limit, stripes) = (cfg.limit, stripe::count().min(1 << cfg.limit.max(1).ilog2()));
        let mut dealt = 0;
        let free = stripe::padded(stripes, || {
            let share = limit / stripes + usize::from(dealt < limit % stripes);
            dealt += 1;
            AtomicUsize::new(share)
        });
        Self {
            free,
            waiting: Padded(AtomicUsize::new(0)),
            freed: Notify::new(),
            limit: cfg.limit,
            queue: cfg.queue,
            background: Padded(AtomicUsize::new(0)),
            freed_background: Notify::new(),
            background_take: std::sync::Mutex::new(()),
            reserved: cfg.reserved_for_live(),
            owed: Padded(AtomicUsize::new(0)),
        }
    }

    /// Gives a slot back: to the stripe of this thread, or to pay off one
    /// held past the limit.
    fn give_back(&self) {
        // A load first: the debt is almost always none, and a line only
        // read stays shared between cores.
        let owed = &self.owed;
        if owed.load(Ordering::SeqCst) > 0
            && owed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
        {
            return;
        }
        // SeqCst pairs with the waiter's: either it sees this slot in its
        // scan, or this sees it waiting and wakes it.
        self.free[stripe::thread_index() & (self.free.len() - 1)].fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
        if self.background.load(Ordering::SeqCst) > 0 {
            self.freed_background.notify_waiters();
        }
    }

    /// The limit on attempts in flight.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Attempts in flight now (a sum over the stripes, read one by one).
    pub(crate) fn in_flight(&self) -> usize {
        let free: usize = self.free.iter().map(|f| f.load(Ordering::Acquire)).sum();
        self.limit.saturating_sub(free) + self.owed.load(Ordering::Acquire)
    }

    /// A slot if one is free right now: this thread's stripe first, then the
    /// others in turn.
    #[inline]
    pub(crate) fn try_acquire(&self) -> Option<Slot<'_>> {
        let mask = self.free.len() - 1;
        let home = stripe::thread_index() & mask;
        if self.take(home) {
            return Some(Slot(self));
        }
        self.try_acquire_elsewhere(home)
    }

    #[cold]
    fn try_acquire_elsewhere(&self, home: usize) -> Option<Slot<'_>> {
        let mask = self.free.len() - 1;
        (1..self.free.len()).map(|i| (home + i) & mask).any(|s| self.take(s)).then(|| Slot(self))
    }

    /// Takes a slot from stripe `s` if it has one; a load first, so an empty
    /// stripe is not written. SeqCst (free on x86) pairs with [`Slot`]'s drop.
    #[inline]
    fn take(&self, s: usize) -> bool {
        let free = &self.free[s];
        let mut n = free.load(Ordering::SeqCst);
        while n > 0 {
            match free.compare_exchange_weak(n, n - 1, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }

    /// A slot for a background call if more than the reserve is free now.
    /// The look and the take are one step among background calls (a
    /// lock only they take): two of them woken by one freed slot cannot
    /// both see room and take the live calls' reserve between them.
    fn try_acquire_background(&self) -> Option<Slot<'_>> {
        let _one_at_a_time = self.background_take.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.limit.saturating_sub(self.in_flight()) > self.reserved {
            self.try_acquire()
        } else {
            None
        }
    }

    /// A slot for a [background](crate::background) call: taken only while
    /// more than the live calls' reserve is free, waited for otherwise —
    /// not bounded by the queue, bounded by `deadline` and `cancel`.
    pub(crate) async fn wait_background(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Slot<'_>, Refused> {
        self.background.fetch_add(1, Ordering::SeqCst);
        let _leave = LeaveQueue(&self.background.0);
        self.wait_for(&self.freed_background, || self.try_acquire_background(), deadline, cancel).await
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
            .fetch_update(Ordering::SeqCst, Ordering::Acquire, |w| (w < self.queue).then_some(w + 1))
            .is_ok();
        if !admitted {
            return Err(Refused::Full);
        }
        let _leave = LeaveQueue(&self.waiting.0);
        self.wait_for(&self.freed, || self.try_acquire(), deadline, cancel).await
    }

    /// `take` tried each time `freed` tells of a slot given back, until it
    /// gives one or `deadline` passes or `cancel` fires.
    async fn wait_for<'a>(
        &'a self,
        freed: &Notify,
        take: impl Fn() -> Option<Slot<'a>>,
        deadline: Option<Instant>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Slot<'a>, Refused> {
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
                let notified = freed.notified();
                tokio::pin!(notified);
                // Registered before the retry, so a slot given back in between
                // still wakes us.
                notified.as_mut().enable();
                if let Some(slot) = take() {
                    return slot;
                }
                notified.await;
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
