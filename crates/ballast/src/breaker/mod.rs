//! Circuit breaker: after enough failed attempts the system is declared
//! unavailable and calls fail fast, until a probe shows it is back.
//!
//! Every attempt of a call passes through the breaker (R-RES-RE-2, R-RES-CB-1),
//! so three failed attempts are three failures. While the breaker is closed,
//! admission is one atomic load and recording an outcome touches only the
//! failure window (atomics for [`Breaker::consecutive`] and [`Breaker::count`]);
//! the mutex is taken only on the way to open, while open or half-open, and
//! for manual control. Time comes from `tokio::time`, so tests run it on a
//! paused clock.

mod config;
mod consecutive;
mod count;
mod sampling;

use config::Kind;
pub use config::{Breaker, HalfOpenAfter};

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::backoff::Delays;
use crate::events::{Emitter, EventKind};
use crate::outcome::Rejection;
use crate::timeout::deadline_after;

use consecutive::Consecutive;
use count::CountWindow;
use sampling::SamplingWindow;

/// How soon after it opened an open breaker lets
/// [background](crate::background) work through as its probe, when
/// `half_open_after` is longer: a durable delivery (keyed, deduplicated,
/// no caller waiting) is a probe that costs the system one request, so a
/// backlog learns within seconds that the system is back — and live calls
/// with it, as the probe's success closes the breaker — where live calls
/// alone would wait out the whole `half_open_after`.
pub const BACKGROUND_PROBE_AFTER: Duration = Duration::from_secs(2);

/// The state of a circuit breaker. As a number (the
/// `ballast_breaker_state` gauge): 0 closed, 1 half-open, 2 open, 3 isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow.
    Closed,
    /// A limited number of probe calls are let through.
    HalfOpen,
    /// Calls are rejected at once until the half-open delay has passed.
    Open,
    /// Held open by hand until released or reset.
    Isolated,
}

impl BreakerState {
    /// 0 closed, 1 half-open, 2 open, 3 isolated.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// `"closed"`, `"half_open"`, `"open"` or `"isolated"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Open => "open",
            BreakerState::Isolated => "isolated",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            0 => BreakerState::Closed,
            1 => BreakerState::HalfOpen,
            2 => BreakerState::Open,
            _ => BreakerState::Isolated,
        }
    }
}

#[derive(Debug)]
enum Window {
    Consecutive(Consecutive),
    Count(CountWindow),
    Sampling(Box<SamplingWindow>),
}

impl Window {
    #[inline]
    fn record(&self, failure: bool) -> bool {
        match self {
            Window::Consecutive(c) => c.record(failure),
            Window::Count(c) => c.record(failure),
            Window::Sampling(s) => s.record(failure, Instant::now()),
        }
    }

    fn reset(&self) {
        match self {
            Window::Consecutive(c) => c.reset(),
            Window::Count(c) => c.reset(),
            Window::Sampling(s) => s.reset(),
        }
    }
}

/// The current state's episode: when it began, when it turns half-open,
/// the delays left before reopening, and the probes of its half-open spell.
#[derive(Debug)]
struct Episode {
    since: Instant,
    half_open_at: Instant,
    reopen_delays: Option<Delays>,
    probes_taken: u32,
    probes_ok: u32,
}

/// The running circuit breaker of one policy: state, manual control and
/// snapshots. Reach it through [`Policy::breaker`](crate::Policy::breaker).
#[derive(Debug)]
pub struct CircuitBreaker {
    cfg: Breaker,
    state: AtomicU8,
    window: Window,
    episode: Mutex<Episode>,
    events: Emitter,
    seed: u64,
}

/// What the breaker let through: a normal call, or one of the probes.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    breaker: &'a CircuitBreaker,
    probe: bool,
    recorded: bool,
}

impl Admission<'_> {
    /// After a wait (a paced call's turn): this admission while the breaker
    /// is still closed, or it is the probe; otherwise the breaker is asked
    /// again — a call admitted before an outage the breaker learned of while
    /// it waited goes only as the probe, or is refused.
    pub(crate) fn readmit(self) -> Result<Self, Rejection> {
        if self.probe || self.breaker.state() == BreakerState::Closed {
            return Ok(self);
        }
        let breaker = self.breaker;
        drop(self);
        breaker.admit_slow(Instant::now())
    }

    /// Records the attempt's outcome.
    #[inline]
    pub(crate) fn record(mut self, failure: bool) {
        self.recorded = true;
        if self.probe {
            self.breaker.record_probe(failure, Instant::now());
        } else if self.breaker.window.record(failure) && failure {
            self.breaker.open_from_closed(Instant::now());
        }
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            self.breaker.release_probe();
        }
    }
}

/// A breaker's state, serializable, so a restarted process can start with
/// its breaker still open.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BreakerSnapshot {
    /// The state when taken.
    pub state: BreakerState,
    /// When open: the wall-clock time a probe is let through.
    pub half_open_at: Option<SystemTime>,
}

impl CircuitBreaker {
    pub(crate) fn new(cfg: Breaker, events: Emitter, seed: u64) -> Self {
        Self::new_at(cfg, events, seed, Instant::now())
    }

    fn new_at(cfg: Breaker, events: Emitter, seed: u64, now: Instant) -> Self {
        let window = match cfg.kind {
            Kind::Consecutive { n } => Window::Consecutive(Consecutive::new(n)),
            Kind::Count { threshold, size, min_calls } => {
                Window::Count(CountWindow::new(threshold, size, min_calls.unwrap_or(size)))
            }
            Kind::Sampling { threshold, period, min_throughput } => {
                Window::Sampling(Box::new(SamplingWindow::new(threshold, period, min_throughput, now)))
            }
        };
        Self {
            cfg,
            state: AtomicU8::new(BreakerState::Closed.as_u8()),
            window,
            episode: Mutex::new(Episode {
                since: now,
                half_open_at: now,
                reopen_delays: None,
                probes_taken: 0,
                probes_ok: 0,
            }),
            events,
            seed,
        }
    }

    /// The current state. An open breaker whose delay has passed still reads
    /// `Open` until the next call moves it to half-open.
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// How long the breaker has been in its current state.
    pub fn in_state_for(&self) -> Duration {
        self.lock().since.elapsed()
    }

    /// How long it would stay open if it opened now (the first delay of a
    /// backoff, when `half_open_after` is one).
    pub fn open_for(&self) -> Duration {
        self.peek_reopen_delay(&self.lock())
    }

    /// When open: the time left until a probe is let through.
    pub fn next_probe_in(&self) -> Option<Duration> {
        (self.state() == BreakerState::Open)
            .then(|| self.lock().half_open_at.saturating_duration_since(Instant::now()))
    }

    /// Holds the breaker open until [`release`](Self::release) or
    /// [`reset`](Self::reset): every call is rejected.
    pub fn isolate(&self) {
        let mut s = self.lock();
        s.since = Instant::now();
        self.state.store(BreakerState::Isolated.as_u8(), Ordering::Release);
        drop(s);
        self.events.emit(EventKind::BreakerIsolated);
    }

    /// Ends an isolation: the breaker closes. Does nothing unless isolated.
    pub fn release(&self) {
        if self.state() == BreakerState::Isolated {
            self.reset();
        }
    }

    /// Closes the breaker and forgets every recorded outcome.
    pub fn reset(&self) {
        let mut s = self.lock();
        let event = self.close(&mut s, Instant::now());
        drop(s);
        self.emit(event);
    }

    /// The state, to restore after a restart.
    pub fn snapshot(&self) -> BreakerSnapshot {
        let s = self.lock();
        let state = self.state();
        let half_open_at = (state == BreakerState::Open)
            .then(|| SystemTime::now() + s.half_open_at.saturating_duration_since(Instant::now()));
        BreakerSnapshot { state, half_open_at }
    }

    /// Starts from a snapshot: an open breaker stays open until its probe time
    /// (a half-open one probes at once), an isolated one stays isolated.
    pub fn restore(&self, snapshot: &BreakerSnapshot) {
        let now = Instant::now();
        match snapshot.state {
            BreakerState::Closed => self.reset(),
            BreakerState::Isolated => self.isolate(),
            BreakerState::Open | BreakerState::HalfOpen => {
                let wait = snapshot
                    .half_open_at
                    .and_then(|at| at.duration_since(SystemTime::now()).ok())
                    .unwrap_or(Duration::ZERO);
                let mut s = self.lock();
                s.since = now;
                s.half_open_at = deadline_after(now, wait);
                s.probes_taken = 0;
                s.probes_ok = 0;
                self.state.store(BreakerState::Open.as_u8(), Ordering::Release);
                drop(s);
                self.events.emit(EventKind::BreakerOpened { half_open_in: wait });
            }
        }
    }

    /// Lets an attempt through, or says why not. Closed: one atomic load.
    #[inline]
    pub(crate) fn admit(&self) -> Result<Admission<'_>, Rejection> {
        if self.state.load(Ordering::Acquire) == BreakerState::Closed.as_u8() {
            return Ok(Admission { breaker: self, probe: false, recorded: false });
        }
        self.admit_slow(Instant::now())
    }

    /// Whether the next attempt would be refused right now, without taking a
    /// probe slot: lets a retry stop at once instead of waiting out its backoff.
    pub(crate) fn refusal(&self) -> Option<Rejection> {
        match self.state() {
            BreakerState::Closed | BreakerState::HalfOpen => None,
            BreakerState::Isolated => Some(Rejection::BreakerIsolated),
            BreakerState::Open => {
                let now = Instant::now();
                let at = self.refuses_until(&self.lock());
                (now < at).then(|| Rejection::BreakerOpen { retry_in: at - now })
            }
        }
    }

    #[cold]
    fn admit_slow(&self, now: Instant) -> Result<Admission<'_>, Rejection> {
        let mut s = self.lock();
        let mut half_opened = false;
        let admission = match self.state() {
            BreakerState::Closed => Ok(Admission { breaker: self, probe: false, recorded: false }),
            BreakerState::Isolated => Err(Rejection::BreakerIsolated),
            BreakerState::Open if now < self.refuses_until(&s) => {
                Err(Rejection::BreakerOpen { retry_in: self.refuses_until(&s) - now })
            }
            BreakerState::Open | BreakerState::HalfOpen => self.half_open(&mut s, now, &mut half_opened),
        };
        drop(s);
        if half_opened {
            self.events.emit(EventKind::BreakerHalfOpened);
        }
        admission
    }

    /// Until when the open breaker refuses the running call: its
    /// `half_open_after`, or [`BACKGROUND_PROBE_AFTER`] for background work
    /// (a durable delivery probes sooner: the backlog learns within seconds
    /// that the system is back, and one probe every few seconds costs it
    /// one request).
    fn refuses_until(&self, s: &Episode) -> Instant {
        match crate::background::current() {
            Some(_) => s.half_open_at.min(deadline_after(s.since, BACKGROUND_PROBE_AFTER)),
            None => s.half_open_at,
        }
    }

    /// A probe's admission, half-opening an open breaker (`half_opened`
    /// says so), or the refusal when the probes are taken.
    fn half_open(
        &self,
        s: &mut Episode,
        now: Instant,
        half_opened: &mut bool,
    ) -> Result<Admission<'_>, Rejection> {
        if self.state() == BreakerState::Open {
            s.since = now;
            s.probes_taken = 0;
            s.probes_ok = 0;
            self.state.store(BreakerState::HalfOpen.as_u8(), Ordering::Release);
            *half_opened = true;
        }
        if s.probes_taken < self.cfg.probes {
            s.probes_taken += 1;
            Ok(Admission { breaker: self, probe: true, recorded: false })
        } else {
            let retry_in = self.peek_reopen_delay(s);
            Err(Rejection::BreakerHalfOpen { retry_in })
        }
    }

    fn record_probe(&self, failure: bool, now: Instant) {
        let mut s = self.lock();
        if self.state() != BreakerState::HalfOpen {
            return;
        }
        let event = if failure {
            Some(self.open(&mut s, now))
        } else {
            s.probes_ok += 1;
            if s.probes_ok >= self.cfg.probes {
                self.close(&mut s, now)
            } else {
                None
            }
        };
        drop(s);
        self.emit(event);
    }

    fn release_probe(&self) {
        let mut s = self.lock();
        if self.state() == BreakerState::HalfOpen {
            s.probes_taken = s.probes_taken.saturating_sub(1);
        }
    }

    #[cold]
    fn open_from_closed(&self, now: Instant) {
        let mut s = self.lock();
        if self.state() == BreakerState::Closed {
            let event = self.open(&mut s, now);
            drop(s);
            self.events.emit(event);
        }
    }

    /// Events go out after the lock is released, so a listener may call back
    /// into the breaker (take a snapshot when it opens, say).
    fn emit(&self, event: Option<EventKind>) {
        if let Some(event) = event {
            self.events.emit(event);
        }
    }

    fn open(&self, s: &mut Episode, now: Instant) -> EventKind {
        let wait = match self.cfg.half_open_after {
            HalfOpenAfter::Fixed(d) => d,
            HalfOpenAfter::Backoff(b) => {
                let seed = self.seed;
                s.reopen_delays.get_or_insert_with(|| b.delays(seed)).next().unwrap_or(b.cap())
            }
        };
        s.since = now;
        s.half_open_at = deadline_after(now, wait);
        s.probes_taken = 0;
        s.probes_ok = 0;
        self.state.store(BreakerState::Open.as_u8(), Ordering::Release);
        EventKind::BreakerOpened { half_open_in: wait }
    }

    fn close(&self, s: &mut Episode, now: Instant) -> Option<EventKind> {
        self.window.reset();
        s.since = now;
        s.reopen_delays = None;
        s.probes_taken = 0;
        s.probes_ok = 0;
        let was = self.state.swap(BreakerState::Closed.as_u8(), Ordering::AcqRel);
        (was != BreakerState::Closed.as_u8()).then_some(EventKind::BreakerClosed)
    }

    /// The wait a failing probe would cause: what a rejected caller can expect.
    fn peek_reopen_delay(&self, s: &Episode) -> Duration {
        match self.cfg.half_open_after {
            HalfOpenAfter::Fixed(d) => d,
            HalfOpenAfter::Backoff(b) => {
                s.reopen_delays.clone().unwrap_or_else(|| b.delays(self.seed)).next().unwrap_or(b.cap())
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Episode> {
        self.episode.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its settings.
    pub fn config(&self) -> &Breaker {
        &self.cfg
    }
}

#[cfg(test)]
mod model_tests;
