//! A rate limit a fleet shares, as one replica holds it: permits granted
//! from outside (by whatever keeps the fleet's bucket — `ballast-fleet`
//! keeps it in PostgreSQL), held for a short while, taken one atomic at a
//! time; and what the system said of its limit (a throttle, an announced
//! rate, a hold), kept for the next grant to carry to the fleet.
//!
//! The limiter of a [`RateLimit::fleet`](super::RateLimit::fleet) policy
//! takes its permits here; the keeper of the fleet's bucket asks what this
//! replica has used and wants ([`RateLimiter::demand`](super::RateLimiter::demand)), grants permits
//! ([`RateLimiter::grant`](super::RateLimiter::grant)) and takes the
//! system's word ([`SharedPermits::signals`]). Permits granted and not taken
//! within their time are dropped, not saved up, so a replica never sends a
//! stored burst. Until the first grant, and while the fleet cannot be
//! reached ([`RateLimiter::degrade`](super::RateLimiter::degrade)), the
//! limiter takes permits from a local bucket at the rate it is told — the
//! fleet's rate over the replicas last seen — until the next grant.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use super::clock::nanos;
use super::gcra::Grant;

/// What this replica has done with its permits, for sizing the next grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// Permits taken here since the limiter was made.
    pub taken: u64,
    /// Attempts refused here for want of a permit since the limiter was made.
    pub refused: u64,
    /// Permits on hand now (negative: owed to attempts that took one on credit).
    pub left: i64,
    /// Attempts waiting now for the next grant, none on hand.
    pub waiting: u64,
}

/// What the system said since the last grant, for the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Signals {
    /// Throttles seen (429s, 503s with `Retry-After`).
    pub throttles: u64,
    /// The rate the system announced last, permits a second.
    pub announced: Option<f64>,
    /// The longest hold it asked for (`Retry-After`, a spent quota).
    pub hold: Option<Duration>,
    /// How long the announced rate holds: the window of the system's
    /// policy (`RateLimit-Policy: 1;w=100`: 100 s), at most `max_hold`.
    pub announced_for: Option<Duration>,
    /// Forget what was learned of the system (a reload, a start): its
    /// announced ceiling, its throttled rate, its hold.
    pub reset: bool,
}

impl Signals {
    /// Whether there is nothing to tell.
    pub fn is_empty(&self) -> bool {
        self.throttles == 0 && self.announced.is_none() && self.hold.is_none() && !self.reset
    }
}

/// A grant of the fleet's bucket to this replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Granted {
    /// Permits granted.
    pub permits: u64,
    /// How long they may be taken.
    pub good_for: Duration,
    /// The fleet's rate now, permits a second.
    pub fleet_rate: f64,
    /// This replica's share of it, permits a second: how soon a refused
    /// attempt may expect the next permit here.
    pub share: f64,
    /// How long the fleet is held by the system's word, if it is.
    pub held_for: Duration,
}

/// The fleet's permits on this replica; see the module docs.
#[derive(Debug)]
pub struct SharedPermits {
    left: AtomicI64,
    /// Until when the permits on hand may be taken, ns on the limiter's clock.
    good_until: AtomicU64,
    taken: AtomicU64,
    refused: AtomicU64,
    waiting: AtomicU64,
    /// ns per permit at this replica's share.
    share_interval: AtomicU64,
    /// The fleet's rate, f64 bits.
    fleet_rate: AtomicU64,
    /// Until when the fleet is held, ns on the limiter's clock.
    held_until: AtomicU64,
    degraded: AtomicBool,
    /// The last grant found the fleet's bucket empty.
    empty: AtomicBool,
    signals: Mutex<Signals>,
    /// Wakes the keeper: permits ran out, or the system said something.
    wanted: Notify,
    /// Wakes the attempts waiting for a grant.
    granted: Notify,
}

/// How long an attempt waits for the keeper's grant when this replica has
/// no permit on hand but the fleet had some at the last one: about a
/// database round trip, far less than a refusal costs a caller.
pub const GRANT_WAIT: Duration = Duration::from_millis(100);

impl SharedPermits {
    pub(super) fn new(rate: f64) -> Self {
        Self {
            left: AtomicI64::new(0),
            good_until: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            share_interval: AtomicU64::new(super::interval(rate)),
            fleet_rate: AtomicU64::new(rate.to_bits()),
            held_until: AtomicU64::new(0),
            // Until the fleet grants, the replica runs on its local bucket.
            degraded: AtomicBool::new(true),
            empty: AtomicBool::new(false),
            signals: Mutex::new(Signals::default()),
            wanted: Notify::new(),
            granted: Notify::new(),
        }
    }

    /// Takes a permit at `now` (ns on the limiter's clock). With none on
    /// hand, the keeper is asked for more: the caller waits for its grant
    /// ([`Grant::Pending`], at most [`GRANT_WAIT`] or `max_wait`, whichever
    /// is longer) unless the fleet is held, or its bucket was empty at the
    /// last grant and `max_wait` is zero — then it is refused at once, as a
    /// local limit refuses.
    pub(super) fn take(&self, now: u64, max_wait: Duration) -> Grant {
        let good = now < self.good_until.load(Ordering::Acquire);
        let mut left = self.left.load(Ordering::Acquire);
        while good && left > 0 {
            match self.left.compare_exchange_weak(left, left - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.taken.fetch_add(1, Ordering::Relaxed);
                    if left <= 1 {
                        self.wanted.notify_one();
                    }
                    return Grant::After(Duration::ZERO);
                }
                Err(now_left) => left = now_left,
            }
        }
        let until_held = self.held_until.load(Ordering::Relaxed).saturating_sub(now);
        let empty = self.empty.load(Ordering::Acquire) && max_wait.is_zero();
        if until_held > 0 || empty {
            let refused = self.refused(now);
            self.wanted.notify_one();
            return refused;
        }
        // Counted before the keeper is woken, so that the lease it takes
        // for this attempt asks for it.
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.wanted.notify_one();
        Grant::Pending(GRANT_WAIT.max(max_wait))
    }

    /// An attempt [`take`](Self::take) answered [`Grant::Pending`] no longer
    /// waits.
    pub(super) fn stop_waiting(&self) {
        let _ = self.waiting.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// A permit taken (or refused) from the local bucket while the fleet's
    /// cannot be reached: counted as demand, and the keeper woken to try the
    /// fleet again.
    pub(super) fn local(&self, grant: Grant) {
        match grant {
            Grant::After(_) => self.taken.fetch_add(1, Ordering::Relaxed),
            _ => self.refused.fetch_add(1, Ordering::Relaxed),
        };
        self.wanted.notify_one();
    }

    /// A refusal: the time until a permit may come here.
    pub(super) fn refused(&self, now: u64) -> Grant {
        self.refused.fetch_add(1, Ordering::AcqRel);
        let interval = self.share_interval.load(Ordering::Relaxed);
        let until_held = self.held_until.load(Ordering::Relaxed).saturating_sub(now);
        Grant::Refused(Duration::from_nanos(interval.max(until_held).max(1_000_000)))
    }

    /// A paced attempt refused above tries again: its refusal is not
    /// counted as demand twice. An attempt is demand once — taken, or
    /// refused for good — so that a replica whose work waits in line
    /// weighs its share by the work, not by how often it looked.
    pub(super) fn retrying(&self) {
        let _ = self.refused.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// A paced attempt that gave up in line, before it asked: demand all
    /// the same.
    pub(super) fn gave_up(&self) {
        self.refused.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits at most `wait` for the keeper's next grant.
    pub(super) async fn next_grant(&self, wait: Duration) {
        let granted = self.granted.notified();
        let _ = tokio::time::timeout(wait, granted).await;
    }

    /// What this replica has used and wants at `now` (ns on the limiter's
    /// clock): permits lapsed by then are not on hand.
    pub fn demand(&self, now: u64) -> Demand {
        let left = self.left.load(Ordering::Acquire);
        let lapsed = now >= self.good_until.load(Ordering::Acquire);
        Demand {
            taken: self.taken.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            left: if lapsed { left.min(0) } else { left },
            waiting: self.waiting.load(Ordering::Acquire),
        }
    }

    /// Hands this replica `grant`, at `now` (ns on the limiter's clock):
    /// permits still good are kept, stale ones dropped, a debt paid first.
    pub(super) fn grant(&self, grant: Granted, now: u64) {
        let stale = now >= self.good_until.load(Ordering::Acquire);
        let permits = i64::try_from(grant.permits).unwrap_or(i64::MAX);
        let _ = self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
            let kept = if stale { left.min(0) } else { left };
            Some(kept.saturating_add(permits))
        });
        self.good_until.store(now.saturating_add(nanos(grant.good_for)), Ordering::Release);
        self.share_interval.store(super::interval(grant.share), Ordering::Relaxed);
        self.fleet_rate.store(grant.fleet_rate.to_bits(), Ordering::Relaxed);
        self.held_until.store(now.saturating_add(nanos(grant.held_for)), Ordering::Relaxed);
        self.empty.store(grant.permits == 0, Ordering::Release);
        self.granted.notify_waiters();
    }

    /// What the system said since the last call, taken.
    pub fn signals(&self) -> Signals {
        std::mem::take(&mut *self.signals.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub(super) fn signal(&self, change: impl FnOnce(&mut Signals)) {
        change(&mut self.signals.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        self.wanted.notify_one();
    }

    /// No permit on hand any more: a hold the system asked for starts here
    /// at once, before the fleet hears of it.
    pub(super) fn drop_permits(&self) {
        self.good_until.store(0, Ordering::Release);
    }

    /// Waits until permits run low or the system said something.
    pub async fn wanted(&self) {
        self.wanted.notified().await;
    }

    /// Whether the limiter runs on its local bucket (the fleet unreachable).
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Acquire)
    }

    pub(super) fn set_degraded(&self, degraded: bool) {
        self.degraded.store(degraded, Ordering::Release);
        if degraded {
            // No grant is coming: those waiting for one take from the local bucket.
            self.granted.notify_waiters();
        }
    }

    /// The fleet's rate as last granted.
    pub(super) fn fleet_rate(&self) -> f64 {
        f64::from_bits(self.fleet_rate.load(Ordering::Relaxed))
    }

    /// This replica's share of the fleet's rate, as last granted.
    pub(super) fn share_rate(&self) -> f64 {
        1e9 / self.share_interval.load(Ordering::Relaxed) as f64
    }

    /// How long the fleet is held, as last granted.
    pub(super) fn held_for(&self, now: u64) -> Duration {
        Duration::from_nanos(self.held_until.load(Ordering::Relaxed).saturating_sub(now))
    }
}
