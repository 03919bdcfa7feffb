//! A deploy as a phase of the process's life, as Envoy drains its
//! listeners, nginx quits gracefully and Kubernetes expects of a pod:
//!
//! 1. **Draining** — on SIGTERM or `POST /admin/drain`: readiness answers
//!    503 at once while the listeners keep accepting and serving for
//!    `[serve] drain_delay`, so load balancers stop sending; answers carry
//!    `Connection: close`, moving kept-alive callers elsewhere.
//! 2. **Closing** — the listeners stop accepting; idle kept-alive
//!    connections are closed; callers waiting on a task (`?wait=`) are
//!    answered with its state; the worker stops claiming and finishes or
//!    releases what it holds. Calls in flight get up to `[serve]
//!    drain_timeout` to finish.
//! 3. **Cut** — a call still in flight then gets an answer, never a reset: a
//!    keyed write to a system that deduplicates by key is handed to the
//!    durable queue with its key (202 with its task when the caller asked
//!    for `Prefer: respond-async`, otherwise `503 draining` saying that
//!    resending it with the same key is safe); any other write is answered
//!    with its outcome unknown; a read with `503 draining`.
//!
//! The phases only move forward; a drain that has nothing left in flight
//! ends as soon as its delay is over. [`DrainSummary`] counts what the
//! drain did with the calls it met.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Where a drain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// No drain: serving as usual.
    Serving,
    /// Readiness fails; the listeners still accept and serve.
    Draining,
    /// The listeners no longer accept; calls in flight finish.
    Closing,
    /// The deadline: every call still in flight is answered now.
    Cut,
}

/// The drain of one `ballast serve`. Cheap to clone; clones share it.
#[derive(Debug, Clone)]
pub struct Drain(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    delay: Duration,
    timeout: Duration,
    phase: watch::Sender<Phase>,
    /// The phase for a glance on every call: no lock.
    now: AtomicU8,
    began: OnceLock<Instant>,
    finished: AtomicU64,
    handed_over: AtomicU64,
    refused: AtomicU64,
}

/// What a drain did with the calls it met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainSummary {
    /// From the drain's start to now (zero when none began).
    pub took: Duration,
    /// Calls answered as usual while draining.
    pub finished: u64,
    /// Keyed writes still in flight at the deadline, handed to the durable queue with their keys.
    pub handed_over: u64,
    /// Calls still in flight at the deadline answered `503 draining` (reads,
    /// and writes whose outcome is unknown).
    pub refused: u64,
}

impl std::fmt::Display for DrainSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "drained in {:.1} s: {} calls finished, {} handed over to the queue, {} refused",
            self.took.as_secs_f64(),
            self.finished,
            self.handed_over,
            self.refused
        )
    }
}

impl Drain {
    /// A drain that serves `delay` after it begins, then gives calls in
    /// flight `timeout` to finish.
    pub fn new(delay: Duration, timeout: Duration) -> Drain {
        let (phase, _) = watch::channel(Phase::Serving);
        Drain(Arc::new(Inner {
            delay,
            timeout,
            phase,
            now: AtomicU8::new(Phase::Serving as u8),
            began: OnceLock::new(),
            finished: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }))
    }

    /// Begins the drain (again is nothing): readiness fails from now on.
    /// True when this call began it.
    pub fn begin(&self) -> bool {
        let began = self.0.phase.send_if_modified(|phase| {
            let serving = *phase == Phase::Serving;
            if serving {
                *phase = Phase::Draining;
            }
            serving
        });
        if began {
            let _ = self.0.began.set(Instant::now());
            self.0.now.store(Phase::Draining as u8, Ordering::Release);
        }
        began
    }

    /// Where the drain is now.
    pub fn phase(&self) -> Phase {
        *self.0.phase.borrow()
    }

    /// Whether a drain began: readiness answers 503.
    pub fn is_draining(&self) -> bool {
        self.0.now.load(Ordering::Acquire) != Phase::Serving as u8
    }

    /// Waits until the drain reaches `phase` (at once if it has).
    pub async fn reached(&self, phase: Phase) {
        let mut seen = self.0.phase.subscribe();
        // The sender lives as long as this drain: no error to see.
        let _ = seen.wait_for(|now| *now >= phase).await;
    }

    /// Moves the drain through its phases once it begins: `delay` of
    /// serving, then `timeout` for the calls in flight, then the cut.
    pub async fn run(self) {
        self.reached(Phase::Draining).await;
        tracing::info!(
            delay = ?self.0.delay,
            timeout = ?self.0.timeout,
            "draining: readiness answers 503; serving on for the drain delay"
        );
        tokio::time::sleep(self.0.delay).await;
        self.advance(Phase::Closing);
        tracing::info!("draining: the listeners stop accepting; calls in flight may finish");
        tokio::time::sleep(self.0.timeout).await;
        self.advance(Phase::Cut);
    }

    fn advance(&self, to: Phase) {
        self.0.phase.send_if_modified(|phase| {
            let forward = *phase < to;
            if forward {
                *phase = to;
                self.0.now.store(to as u8, Ordering::Release);
            }
            forward
        });
    }

    /// A call answered as usual; counted when the drain has begun.
    pub fn finished(&self) {
        if self.is_draining() {
            self.0.finished.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A keyed write handed to the queue at the deadline.
    pub fn handed_over(&self) {
        self.0.handed_over.fetch_add(1, Ordering::Relaxed);
    }

    /// A call answered `503 draining` at the deadline.
    pub fn refused(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// How long a listener waits, once it stops accepting, for its
    /// connections to end: the timeout, and time to write the answers the
    /// cut makes.
    pub(crate) fn grace(&self) -> Duration {
        self.0.timeout + ANSWER_GRACE
    }

    /// What the drain did so far.
    pub fn summary(&self) -> DrainSummary {
        DrainSummary {
            took: self.0.began.get().map_or(Duration::ZERO, Instant::elapsed),
            finished: self.0.finished.load(Ordering::Relaxed),
            handed_over: self.0.handed_over.load(Ordering::Relaxed),
            refused: self.0.refused.load(Ordering::Relaxed),
        }
    }
}

impl Default for Drain {
    /// The defaults of `[serve]`: 5 s of serving, 25 s for calls in flight.
    fn default() -> Self {
        Drain::new(ballast_config::DEFAULT_DRAIN_DELAY, ballast_config::DEFAULT_DRAIN_TIMEOUT)
    }
}

/// How long the answers the cut makes may take to be written.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_phases_move_forward_on_their_clock() {
        let drain = Drain::new(Duration::from_secs(5), Duration::from_secs(25));
        tokio::spawn(drain.clone().run());
        tokio::task::yield_now().await;
        assert_eq!(drain.phase(), Phase::Serving);
        drain.finished();
        assert!(drain.begin() && !drain.begin(), "a drain begins once");
        let start = Instant::now();
        drain.reached(Phase::Closing).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        drain.finished();
        drain.reached(Phase::Cut).await;
        assert_eq!(start.elapsed(), Duration::from_secs(30));
        drain.handed_over();
        drain.refused();
        let summary = drain.summary();
        assert_eq!(
            (summary.finished, summary.handed_over, summary.refused),
            (1, 1, 1),
            "calls before the drain are not its"
        );
        assert_eq!(
            summary.to_string(),
            "drained in 30.0 s: 1 calls finished, 1 handed over to the queue, 1 refused"
        );
    }
}
