//! Retry budget: retries may add at most a fraction of the recent calls (plus
//! a small floor), so a fleet of clients cannot multiply the load on a sick
//! system — in the spirit of Finagle's `RetryBudget` and the SRE book.
//!
//! Recording a call is one relaxed atomic add and never reads the clock: the
//! calls counted since the last retry are placed in time only when the next
//! retry asks for budget, spread evenly over the interval since then. That is
//! the only approximation, and it errs on neither side on average.
//!
//! The count is striped per thread (see `stripe`), so calls on different
//! cores never write the same cache line; a retry sums and empties every
//! stripe under the window's lock. Every call is still counted exactly once,
//! so striping changes no bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::rules::Violation;
use crate::stripe::{self, Padded};

/// Number of buckets the window is cut into.
const BUCKETS: usize = 10;

/// Retry budget settings.
///
/// Over any `window`, retries may number at most
/// `ratio · calls + min_per_sec · window`. The default is 10 % over 10 s plus
/// 10 retries a second.
///
/// ```
/// use std::time::Duration;
/// use ballast::{Budget, Retry};
///
/// let retry = Retry::attempts(3).budget(Budget::ratio(0.2).window(Duration::from_secs(30)));
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, derive_setters::Setters)]
#[setters(generate = false)]
pub struct Budget {
    ratio: f64,
    /// How far back "recent" reaches (default 10 s).
    #[setters(generate)]
    window: Duration,
    /// Retries always allowed per second whatever the traffic (default 10).
    #[setters(generate)]
    min_per_sec: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Self { ratio: 0.1, window: Duration::from_secs(10), min_per_sec: 10 }
    }
}

impl Budget {
    /// Retries may add `ratio` of the recent calls (default 0.1).
    pub fn ratio(ratio: f64) -> Self {
        Self { ratio, ..Self::default() }
    }

    /// The ratio.
    pub fn get_ratio(&self) -> f64 {
        self.ratio
    }

    /// The window.
    pub fn get_window(&self) -> Duration {
        self.window
    }

    /// The floor, in retries per second.
    pub fn get_min_per_sec(&self) -> u32 {
        self.min_per_sec
    }

    /// The floor over one window: retries always allowed.
    pub fn floor(&self) -> u64 {
        (f64::from(self.min_per_sec) * self.window.as_secs_f64()).floor() as u64
    }

    pub(crate) fn check(&self, out: &mut Vec<Violation>) {
        if !(self.ratio.is_finite() && (0.0..=1.0).contains(&self.ratio)) {
            out.push(Violation::error(
                None,
                "retry.budget_ratio",
                format!("the budget ratio {} is outside [0, 1]", self.ratio),
                "use a fraction of recent calls, e.g. 0.1 for 10 %",
            ));
        }
        if self.window.is_zero() {
            out.push(Violation::error(
                None,
                "retry.budget_window",
                "the budget window is zero".into(),
                "use a window of several seconds, e.g. 10 s",
            ));
        }
    }
}

/// How much of a retry budget is spent over its current window; see
/// [`Policy::budget_level`](crate::Policy::budget_level).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetLevel {
    /// Retries the window allows: `ratio · calls + floor`.
    pub allowed: f64,
    /// Retries taken in the window.
    pub used: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    epoch: u64,
    calls: f64,
    retries: u64,
}

#[derive(Debug)]
struct Window {
    origin: Instant,
    synced: Instant,
    buckets: [Bucket; BUCKETS],
}

/// The running budget shared by every call of one policy.
///
/// [`level`](Self::level) reads the stripes one after another, not as one
/// snapshot: a view for dashboards may miss calls counted while it reads.
/// A retry's decision never does: it empties every stripe under the lock, and
/// a call counted during that pass is placed by the next retry.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    cfg: Budget,
    bucket_len: Duration,
    /// Calls not yet placed in time, one counter per stripe.
    unplaced_calls: Box<[Padded<AtomicU64>]>,
    window: Mutex<Window>,
}

impl RetryBudget {
    pub(crate) fn new(cfg: Budget) -> Self {
        let now = Instant::now();
        Self {
            cfg,
            bucket_len: cfg.window / BUCKETS as u32,
            unplaced_calls: stripe::padded(stripe::count(), || AtomicU64::new(0)),
            window: Mutex::new(Window { origin: now, synced: now, buckets: [Bucket::default(); BUCKETS] }),
        }
    }

    /// Counts a call. No clock, no lock, and a cache line only this thread
    /// writes (unless more threads than stripes share it).
    #[inline]
    pub(crate) fn deposit(&self) {
        let stripes = &self.unplaced_calls;
        stripes[stripe::thread_index() & (stripes.len() - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one retry from the budget, or says there is none left.
    pub(crate) fn try_withdraw(&self) -> bool {
        self.try_withdraw_at(Instant::now())
    }

    fn try_withdraw_at(&self, now: Instant) -> bool {
        let mut w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.epoch(&w, now);
        let unplaced = self.unplaced_calls.iter().map(|c| c.swap(0, Ordering::Relaxed)).sum::<u64>() as f64;
        let since = now.saturating_duration_since(w.synced);
        let recent = if since <= self.cfg.window || since.is_zero() {
            unplaced
        } else {
            unplaced * self.cfg.window.as_secs_f64() / since.as_secs_f64()
        };
        w.synced = now;
        let oldest = epoch.saturating_sub(BUCKETS as u64 - 1);
        let slot = (epoch % BUCKETS as u64) as usize;
        if w.buckets[slot].epoch != epoch {
            w.buckets[slot] = Bucket { epoch, calls: 0.0, retries: 0 };
        }
        w.buckets[slot].calls += recent;
        let (calls, retries) = w
            .buckets
            .iter()
            .filter(|b| b.epoch >= oldest && b.epoch <= epoch)
            .fold((0.0, 0u64), |(c, r), b| (c + b.calls, r + b.retries));
        let allowed = self.cfg.floor() as f64 + self.cfg.ratio * calls;
        if (retries as f64) + 1.0 <= allowed {
            w.buckets[slot].retries += 1;
            true
        } else {
            false
        }
    }

    /// The budget over the current window, without taking from it.
    pub(crate) fn level(&self) -> BudgetLevel {
        let now = Instant::now();
        let w = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.epoch(&w, now);
        let oldest = epoch.saturating_sub(BUCKETS as u64 - 1);
        // Calls not yet placed in time count as recent, as the next retry
        // would place them (approximately, for a view; no state changes).
        let unplaced = self.unplaced_calls.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>() as f64;
        let (calls, used) = w
            .buckets
            .iter()
            .filter(|b| b.epoch >= oldest && b.epoch <= epoch)
            .fold((unplaced, 0u64), |(c, r), b| (c + b.calls, r + b.retries));
        BudgetLevel { allowed: self.cfg.floor() as f64 + self.cfg.ratio * calls, used }
    }

    fn epoch(&self, w: &Window, now: Instant) -> u64 {
        let nanos = self.bucket_len.as_nanos().max(1);
        (now.saturating_duration_since(w.origin).as_nanos() / nanos) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn floor_then_ratio_of_calls() {
        let b = RetryBudget::new(Budget::ratio(0.1).min_per_sec(1).window(Duration::from_secs(10)));
        // floor = 10 retries per 10 s window with no traffic at all
        let granted = (0..50).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 10);
        for _ in 0..100 {
            b.deposit();
        }
        let granted = (0..50).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 10, "100 calls buy 10 more retries");
    }

    #[tokio::test(start_paused = true)]
    async fn budget_refills_as_the_window_slides() {
        let b = RetryBudget::new(Budget::ratio(0.0).min_per_sec(1).window(Duration::from_secs(10)));
        assert_eq!((0..20).filter(|_| b.try_withdraw()).count(), 10);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!((0..20).filter(|_| b.try_withdraw()).count(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn old_calls_do_not_buy_retries() {
        let b = RetryBudget::new(Budget::ratio(0.5).min_per_sec(0).window(Duration::from_secs(10)));
        for _ in 0..1000 {
            b.deposit();
        }
        tokio::time::advance(Duration::from_secs(1000)).await;
        // 1000 calls spread over 1000 s: about 10 fall in the last 10 s → 5 retries
        let granted = (0..100).filter(|_| b.try_withdraw()).count();
        assert_eq!(granted, 5);
    }
}
