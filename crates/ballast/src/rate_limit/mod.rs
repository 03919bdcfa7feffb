//! Rate limit: at most so many attempts a second reach one external
//! system, every attempt counted — retries too — so a system that publishes
//! a limit is not sent more than it allows.
//!
//! The limiter sits per attempt inside the breaker, beside the bulkhead: an
//! attempt the breaker lets through and that has a bulkhead slot takes a
//! permit before it is sent. One that gets none within [`RateLimit::wait`]
//! is not sent and ends the call as
//! [`Rejection::RateLimited`](crate::Rejection::RateLimited), with the time
//! until a permit frees: "system unavailable", like an open breaker, so a
//! keyed write can be handed to the durable queue, due when it may go.
//!
//! With [`RateLimit::adaptive`] the rate follows what the system accepts
//! (see [`adaptive`] for the rule and its constants), and what it announces:
//! the HTTP integration reads `RateLimit`/`RateLimit-Policy` and
//! `X-RateLimit-*` headers and tells the limiter
//! ([`RateLimiter::announce`], [`RateLimiter::hold_until`]).
//!
//! What a system says is bounded, so one answer cannot stall it: an
//! announced rate is never taken below [`adaptive::FLOOR`] of the
//! configured one, and a hold (`Retry-After`, a spent quota) lasts at most
//! [`RateLimit::max_hold`] (10 minutes unless set) — less where the caller
//! caps it further ([`RateLimiter::cap_holds`]: an HTTP system caps it at its
//! key's TTL). [`RateLimiter::reset`] forgets what was learned.

pub mod adaptive;
mod clock;
mod config;
mod gcra;
pub mod shared;

pub use config::{RateLimit, Scope, DEFAULT_MAX_HOLD, MAX_RATE};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::events::{Emitter, EventKind};
use adaptive::Aimd;
use clock::nanos;
use gcra::Gcra;
pub(crate) use gcra::Grant;
use shared::{Demand, Granted, SharedPermits};

/// The limiter of one policy, shared by its clones: permits, and what the
/// system says about its limit.
#[derive(Debug)]
pub struct RateLimiter {
    limit: RateLimit,
    gcra: Gcra,
    /// The emission interval, ns per permit, of a fixed limit.
    interval: u64,
    /// The adaptive rule's state; the rate it last decided and when are
    /// mirrored in `decided` (f64 bits) and `decided_at` for the lock-free path.
    adaptive: Option<Mutex<Aimd>>,
    decided: AtomicU64,
    decided_at: AtomicU64,
    ceiling: AtomicU64,
    limited: AtomicU64,
    /// The longest hold, ns; lowered by [`RateLimiter::cap_holds`].
    hold_cap: AtomicU64,
    /// Until when the system's word holds every attempt, ns on the limiter's clock.
    held_until: AtomicU64,
    /// A fleet's permits, for a fleet-wide limit; and the local interval
    /// while the fleet cannot be reached.
    shared: Option<SharedPermits>,
    degraded_interval: AtomicU64,
    /// The line of [paced](crate::background_within) attempts: only its head
    /// waits for a permit, so a backlog reserves one permit at a time, in
    /// the order it came, rather than the bucket seconds ahead.
    line: tokio::sync::Mutex<()>,
    events: Emitter,
}

/// A rate limiter's state, for dashboards and metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateSnapshot {
    /// Permits a second now.
    pub rate: f64,
    /// The configured rate, or the one the system announced.
    pub ceiling: f64,
    /// Permits handed out since the policy was built.
    pub granted: u64,
    /// Attempts refused for want of a permit since the policy was built.
    pub limited: u64,
    /// How long the system's word (a `Retry-After`, a spent quota) still
    /// holds every attempt; zero when it does not.
    pub held_for: Duration,
}

impl RateLimiter {
    pub(crate) fn new(limit: RateLimit, events: Emitter) -> Self {
        let rate = limit.rate().min(MAX_RATE);
        Self {
            gcra: Gcra::new(limit.get_burst()),
            interval: interval(rate),
            adaptive: limit.adaptive.then(|| Mutex::new(Aimd::new(rate))),
            decided: AtomicU64::new(rate.to_bits()),
            decided_at: AtomicU64::new(0),
            ceiling: AtomicU64::new(rate.to_bits()),
            limited: AtomicU64::new(0),
            hold_cap: AtomicU64::new(nanos(limit.max_hold)),
            held_until: AtomicU64::new(0),
            shared: (limit.scope == Scope::Fleet).then(|| SharedPermits::new(rate)),
            degraded_interval: AtomicU64::new(interval(rate)),
            line: tokio::sync::Mutex::new(()),
            limit,
            events,
        }
    }

    /// The settings.
    pub fn limit(&self) -> &RateLimit {
        &self.limit
    }

    /// Permits a second now: a fleet's rate for a fleet-wide limit (this
    /// replica's local one while the fleet cannot be reached).
    pub fn rate(&self) -> f64 {
        match &self.shared {
            Some(shared) if !shared.is_degraded() => shared.fleet_rate(),
            Some(_) => 1e9 / self.degraded_interval.load(Ordering::Relaxed) as f64,
            None => self.rate_at(self.gcra.now()),
        }
    }

    /// Permits a second this replica may expect: its share of a fleet-wide
    /// limit's rate (the whole fleet's until the first grant, its local
    /// rate while the fleet cannot be reached), the limit's rate otherwise.
    /// A worker sizes what it holds by it.
    pub fn share(&self) -> f64 {
        match &self.shared {
            Some(shared) if !shared.is_degraded() => shared.share_rate(),
            _ => self.rate(),
        }
    }

    /// The fleet's permits on this replica, for a fleet-wide limit.
    pub fn shared(&self) -> Option<&SharedPermits> {
        self.shared.as_ref()
    }

    /// What this replica has used and wants of a fleet-wide limit's permits
    /// (see [`SharedPermits::demand`]), now.
    pub fn demand(&self) -> Option<Demand> {
        self.shared.as_ref().map(|shared| shared.demand(self.gcra.now()))
    }

    /// Hands this replica permits of the fleet's bucket (a fleet-wide limit
    /// only): the limiter takes them, not its local bucket, from now on.
    pub fn grant(&self, grant: Granted) {
        if let Some(shared) = &self.shared {
            shared.grant(grant, self.gcra.now());
            shared.set_degraded(false);
        }
    }

    /// The fleet's bucket cannot be reached: this replica takes permits from
    /// its local bucket at `rate` (the fleet's rate over the replicas last
    /// seen) until the next [`grant`](Self::grant).
    pub fn degrade(&self, rate: f64) {
        if let Some(shared) = &self.shared {
            self.degraded_interval.store(interval(rate.min(MAX_RATE)), Ordering::Relaxed);
            shared.set_degraded(true);
        }
    }

    /// The state now.
    pub fn snapshot(&self) -> RateSnapshot {
        RateSnapshot {
            rate: self.rate(),
            ceiling: f64::from_bits(self.ceiling.load(Ordering::Relaxed)),
            granted: self.gcra.granted() + self.demand().map_or(0, |d| d.taken),
            limited: self.limited.load(Ordering::Relaxed),
            held_for: self.held_for(),
        }
    }

    fn held_for(&self) -> Duration {
        let now = self.gcra.now();
        let local = Duration::from_nanos(self.held_until.load(Ordering::Relaxed).saturating_sub(now));
        local.max(self.shared.as_ref().map_or(Duration::ZERO, |s| s.held_for(now)))
    }

    fn rate_at(&self, now: u64) -> f64 {
        if self.adaptive.is_none() {
            return 1e9 / self.interval as f64;
        }
        let aimd = Aimd {
            ceiling: f64::from_bits(self.ceiling.load(Ordering::Relaxed)),
            decided: f64::from_bits(self.decided.load(Ordering::Relaxed)),
            decided_at: self.decided_at.load(Ordering::Relaxed),
            window: None,
        };
        aimd.rate_at(now)
    }

    fn interval_at(&self, now: u64) -> u64 {
        match self.adaptive {
            None => self.interval,
            Some(_) => interval(self.rate_at(now)),
        }
    }

    /// Takes a permit for an attempt, reserving one due within the wait
    /// and within `room` (what is left of the call's deadline).
    pub(crate) fn take(&self, room: Duration) -> Grant {
        self.counted(self.offer(self.limit.wait.min(room)))
    }

    /// A permit due within `wait`, reserved; or why not, uncounted.
    fn offer(&self, wait: Duration) -> Grant {
        let now = self.gcra.now();
        match &self.shared {
            Some(shared) if !shared.is_degraded() => shared.take(now, wait),
            Some(shared) => {
                let grant = self.gcra.take(now, self.degraded_interval.load(Ordering::Relaxed), wait);
                shared.local(grant);
                grant
            }
            None => self.gcra.take(now, self.interval_at(now), wait),
        }
    }

    /// [`take`](Self::take) for a fleet's permits none of which was on
    /// hand ([`Grant::Pending`]): waits up to `wait` for the keeper's grant
    /// and takes again, refused if there is still none.
    pub(crate) async fn take_granted(&self, wait: Duration, room: Duration) -> Grant {
        let grant = self.offer_granted(wait, room).await;
        self.counted(grant)
    }

    async fn offer_granted(&self, wait: Duration, room: Duration) -> Grant {
        let Some(shared) = &self.shared else { return self.offer(self.limit.wait.min(room)) };
        /// Stops the waiting [`SharedPermits::take`] counted, however the
        /// wait ends (a call dropped while it waits included).
        struct Waiting<'a>(&'a SharedPermits);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.stop_waiting();
            }
        }
        let waiting = Waiting(shared);
        shared.next_grant(wait.min(room)).await;
        drop(waiting);
        let now = self.gcra.now();
        match shared.take(now, Duration::ZERO) {
            Grant::Pending(_) => {
                shared.stop_waiting();
                shared.refused(now)
            }
            grant => grant,
        }
    }

    /// A permit for a [paced](crate::background_within) attempt: it waits in
    /// line, then for a permit — the fleet's next grant, the end of a hold —
    /// for as long as `room` allows. [`Grant::After`] a wait the caller
    /// sleeps while it still holds the returned place in line (so the
    /// next in line reserves the permit after this one, not the same
    /// stretch of the bucket); `None` when `room` ran out in line.
    pub(crate) async fn take_paced(
        &self,
        room: Duration,
    ) -> Option<(Grant, tokio::sync::MutexGuard<'_, ()>)> {
        let until = crate::timeout::deadline_after(Instant::now(), room);
        let Ok(place) = tokio::time::timeout_at(until, self.line.lock()).await else {
            if let Some(shared) = &self.shared {
                shared.gave_up();
            }
            return None;
        };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let grant = match self.offer(left) {
                Grant::Pending(wait) => self.offer_granted(wait, left).await,
                grant => grant,
            };
            match grant {
                // A fleet whose grant went to others, or held by the
                // system's word: looked at again when a permit may come.
                // Not sooner than a grant's round trip: a fleet's empty
                // bucket is not asked again and again.
                Grant::Refused(retry_in) if retry_in < left => {
                    if let Some(shared) = &self.shared {
                        shared.retrying();
                    }
                    tokio::time::sleep(retry_in.max(shared::GRANT_WAIT).min(left)).await;
                }
                grant => return Some((self.counted(grant), place)),
            }
        }
    }

    /// About how long until a permit: one interval at the rate now.
    pub(crate) fn interval_now(&self) -> Duration {
        Duration::from_nanos(interval(self.rate()))
    }

    /// `grant`, a refusal counted and told.
    pub(crate) fn counted(&self, grant: Grant) -> Grant {
        if let Grant::Refused(retry_in) = grant {
            self.limited.fetch_add(1, Ordering::Relaxed);
            self.events.emit(EventKind::RateLimited { retry_in });
        }
        grant
    }

    /// The system throttled an attempt (a 429, a 503 with `Retry-After`):
    /// an adaptive limiter lowers its rate (see [`adaptive`]). A
    /// `retry_after` longer than a second also holds every attempt until it
    /// has passed; one of a second or less — the least the header can say —
    /// only slows the rate.
    pub fn throttled(&self, retry_after: Option<Duration>) {
        let Some(adaptive) = &self.adaptive else { return };
        if let Some(shared) = &self.shared {
            // The fleet decides its rate from every replica's throttles.
            shared.signal(|s| s.throttles += 1);
            if let Some(after) = retry_after.filter(|after| *after > Duration::from_secs(1)) {
                self.hold_for(after);
            }
            return;
        }
        let now = self.gcra.now();
        let decided = {
            let mut aimd = adaptive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let decided = aimd.throttled(now, self.gcra.granted());
            if decided.is_some() {
                self.publish(&aimd);
            }
            decided
        };
        if let Some(rate) = decided {
            self.events.emit(EventKind::RateChanged { rate });
        }
        if let Some(after) = retry_after.filter(|after| *after > Duration::from_secs(1)) {
            self.hold_for(after);
        }
    }

    /// The system announced its rate (`RateLimit-Policy: q=100;w=60` is
    /// 100/60 a second): an adaptive limiter takes it as its rate and its
    /// ceiling at once — never below [`adaptive::FLOOR`] of the configured
    /// rate, so a `w` of a year cannot stop the system.
    pub fn announce(&self, rate: f64) {
        self.announce_for(rate, None);
    }

    /// [`announce`](Self::announce), for the policy's window (`w`): a
    /// fleet's limit holds the announced ceiling that long, at most
    /// `max_hold`, unless the system says it again (a replica's own
    /// limit holds it until a reload or a restart).
    pub fn announce_for(&self, rate: f64, window: Option<Duration>) {
        let Some(adaptive) = &self.adaptive else { return };
        if !(rate.is_finite() && rate > 0.0) {
            return;
        }
        let configured = self.limit.rate().min(MAX_RATE);
        let rate = rate.clamp(configured * adaptive::FLOOR, MAX_RATE);
        if let Some(shared) = &self.shared {
            shared.signal(|s| {
                s.announced = Some(rate);
                s.announced_for = window;
            });
            return;
        }
        // Systems send their policy on every answer: the published ceiling
        // answers "unchanged" without the lock (checked again under it).
        if f64::from_bits(self.ceiling.load(Ordering::Relaxed)) == rate {
            return;
        }
        {
            let mut aimd = adaptive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if aimd.ceiling == rate {
                return;
            }
            aimd.announced(rate, self.gcra.now());
            self.publish(&aimd);
        }
        self.events.emit(EventKind::RateChanged { rate });
    }

    /// No permit before `until` (a quota spent until its reset: `RateLimit:
    /// r=0;t=30`, `X-RateLimit-Remaining: 0`), nor later than the longest
    /// hold ([`RateLimit::max_hold`], [`cap_holds`](Self::cap_holds)) from
    /// now. Only an adaptive limiter listens to the system.
    pub fn hold_until(&self, until: Instant) {
        self.hold_for(until.saturating_duration_since(Instant::now()));
    }

    /// [`hold_until`](Self::hold_until) `for_` from now.
    fn hold_for(&self, for_: Duration) {
        if self.adaptive.is_none() {
            return;
        }
        let now = self.gcra.now();
        let capped = nanos(for_).min(self.hold_cap.load(Ordering::Relaxed));
        let at = now.saturating_add(capped);
        self.held_until.fetch_max(at, Ordering::Relaxed);
        self.gcra.hold_until(at, self.interval_at(now));
        if let Some(shared) = &self.shared {
            // Held here at once; the fleet holds from the next grant on.
            shared.drop_permits();
            let hold = Duration::from_nanos(capped);
            shared.signal(|s| s.hold = Some(s.hold.map_or(hold, |h| h.max(hold))));
        }
    }

    /// Holds last at most `cap` from now on, if that is shorter than
    /// [`RateLimit::max_hold`] (an HTTP system's key TTL: a write held
    /// longer could no longer be deduplicated).
    pub fn cap_holds(&self, cap: Duration) {
        self.hold_cap.fetch_min(nanos(cap), Ordering::Relaxed);
    }

    /// Forgets what the system said: the configured rate and burst again, no
    /// hold (a configuration reload).
    pub fn reset(&self) {
        // A fleet's limit forgets too, with the next lease.
        if let Some(shared) = &self.shared {
            shared.signal(|s| s.reset = true);
        }
        if let Some(adaptive) = &self.adaptive {
            let mut aimd = adaptive.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *aimd = Aimd::new(self.limit.rate().min(MAX_RATE));
            self.publish(&aimd);
        }
        self.held_until.store(0, Ordering::Relaxed);
        self.gcra.reset();
    }

    /// Mirrors a decision for the lock-free path.
    fn publish(&self, aimd: &Aimd) {
        self.ceiling.store(aimd.ceiling.to_bits(), Ordering::Relaxed);
        self.decided.store(aimd.decided.to_bits(), Ordering::Relaxed);
        self.decided_at.store(aimd.decided_at, Ordering::Relaxed);
    }
}

/// Nanoseconds per permit at `rate` permits a second.
fn interval(rate: f64) -> u64 {
    if !(rate.is_finite() && rate > 0.0) {
        return u64::MAX;
    }
    (1e9 / rate).round().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Emitter;

    fn limiter(limit: RateLimit) -> RateLimiter {
        RateLimiter::new(limit, Emitter::new("sys".into(), Vec::new()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_limit_ignores_what_the_system_says() {
        let limiter = limiter(RateLimit::per_second(10).burst(1));
        limiter.throttled(Some(Duration::from_secs(60)));
        limiter.announce(1.0);
        limiter.hold_until(Instant::now() + Duration::from_secs(60));
        assert_eq!(limiter.take(Duration::MAX), Grant::After(Duration::ZERO));
        assert_eq!(limiter.rate(), 10.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_retry_after_holds_every_attempt() {
        let limiter = limiter(RateLimit::per_second(10).burst(1).adaptive());
        limiter.throttled(Some(Duration::from_secs(30)));
        match limiter.take(Duration::MAX) {
            Grant::Refused(retry_in) => assert!(retry_in > Duration::from_secs(29), "{retry_in:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(limiter.snapshot().limited, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_announced_rate_is_the_rate_and_the_ceiling() {
        let limiter = limiter(RateLimit::per_second(100).adaptive());
        limiter.announce(100.0 / 60.0);
        let snapshot = limiter.snapshot();
        assert!(
            (snapshot.rate - 100.0 / 60.0).abs() < 1e-9 && snapshot.ceiling == snapshot.rate,
            "{snapshot:?}"
        );
    }

    /// N3: whatever a system says, a hold lasts at most `max_hold` (and
    /// what `cap_holds` lowers it to), an announced rate is floored, and a
    /// reset forgets it all.
    #[tokio::test(start_paused = true)]
    async fn what_a_system_says_is_bounded_and_forgotten_on_reset() {
        let limiter =
            limiter(RateLimit::per_second(100).burst(1).adaptive().max_hold(Duration::from_secs(600)));
        limiter.throttled(Some(Duration::from_secs(999_999_999)));
        assert_eq!(limiter.snapshot().held_for, Duration::from_secs(600));
        match limiter.take(Duration::MAX) {
            Grant::Refused(retry_in) => assert!(retry_in <= Duration::from_secs(601), "{retry_in:?}"),
            other => panic!("{other:?}"),
        }
        limiter.cap_holds(Duration::from_secs(60));
        limiter.reset();
        limiter.hold_until(Instant::now() + Duration::from_secs(3600));
        assert_eq!(limiter.snapshot().held_for, Duration::from_secs(60), "capped by the key's TTL");
        limiter.announce(1.0 / 31_536_000.0);
        assert_eq!(limiter.snapshot().ceiling, 100.0 * adaptive::FLOOR, "a year's window is floored");
        limiter.reset();
        let now = limiter.snapshot();
        assert_eq!((now.rate, now.ceiling, now.held_for), (100.0, 100.0, Duration::ZERO));
        assert_eq!(
            limiter.take(Duration::MAX),
            Grant::After(Duration::ZERO),
            "a permit at once after a reset"
        );
    }

    #[test]
    fn settings_are_checked() {
        let mut out = Vec::new();
        RateLimit::new(0, Duration::from_secs(1)).check(&mut out);
        RateLimit::per_second(10).burst(0).check(&mut out);
        RateLimit::per_second(10).wait(Duration::from_secs(10)).check(&mut out);
        let settings: Vec<_> = out.iter().map(|v| (v.setting, v.severity)).collect();
        use crate::Severity::*;
        assert_eq!(
            settings,
            [("rate_limit.rate", Error), ("rate_limit.burst", Error), ("rate_limit.wait", Warning)]
        );
    }
}
