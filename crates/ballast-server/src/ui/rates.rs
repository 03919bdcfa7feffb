//! Calls and attempts per second per system, from the running totals of
//! each [`HttpSystem`](ballast_http::HttpSystem): the totals are sampled in
//! the background every [`STEP`], so a page shows the traffic of the last
//! [`WINDOW`] from the first look on, not only between two page views.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ballast_http::{HttpSystem, Systems};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the totals are sampled.
pub(super) const STEP: Duration = Duration::from_secs(1);

/// The span rates are measured over, at most.
pub(super) const WINDOW: Duration = Duration::from_secs(10);

/// Below this, a span is too short to divide by.
const MIN_SPAN: Duration = Duration::from_millis(100);

/// A system's totals at one moment.
#[derive(Debug, Clone, Copy)]
struct Look {
    at: Instant,
    calls: u64,
    attempts: u64,
    /// Rate-limit permits handed out.
    permits: u64,
}

impl Look {
    fn of(system: &HttpSystem, at: Instant) -> Look {
        let stats = system.stats();
        let permits = system.policy().rate_limiter().map_or(0, |l| l.snapshot().granted);
        Look { at, calls: stats.calls, attempts: stats.attempts, permits }
    }
}

/// Per second, over the last [`WINDOW`] (or since the system was first seen).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Rate {
    pub calls: f64,
    pub attempts: f64,
    /// Rate-limit permits used.
    pub permits: f64,
}

/// The recent looks at every system, oldest first.
#[derive(Default)]
pub(super) struct Rates(Mutex<HashMap<String, VecDeque<Look>>>);

impl Rates {
    /// Rates that start from the totals of `systems` now.
    pub(super) fn new(systems: &Systems) -> Self {
        let rates = Rates::default();
        rates.sample(systems);
        rates
    }

    /// Records the totals of every system now, forgetting looks older than
    /// the window (and systems a reload removed).
    pub(super) fn sample(&self, systems: &Systems) {
        let now = Instant::now();
        let all = systems.all();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name, _| all.iter().any(|s| s.name() == name));
        for system in &all {
            self.record(system.name(), Look::of(system, now));
            // An adaptive limit's rate climbs, and its hold runs out, between the events that set them.
            if let Some(limiter) = system.policy().rate_limiter() {
                ballast_http::metrics::record_rate_limit(system.name(), limiter);
            }
        }
    }

    fn record(&self, name: &str, look: Look) {
        let mut looks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = looks.entry(name.to_owned()).or_default();
        kept.push_back(look);
        // The oldest kept look is the newest one at least WINDOW old.
        while kept.get(1).is_some_and(|l| look.at.duration_since(l.at) >= WINDOW) {
            kept.pop_front();
        }
    }

    /// Samples until `stop` is cancelled.
    pub(super) async fn run(&self, systems: Systems, stop: CancellationToken) {
        let mut every = tokio::time::interval(STEP);
        while stop.run_until_cancelled(every.tick()).await.is_some() {
            self.sample(&systems);
        }
    }

    /// The rate of `system` now: its totals against the oldest look kept.
    pub(super) fn of(&self, system: &HttpSystem) -> Rate {
        self.rate(system.name(), Look::of(system, Instant::now()))
    }

    fn rate(&self, name: &str, now: Look) -> Rate {
        let base =
            self.0.lock().unwrap_or_else(PoisonError::into_inner).get(name).and_then(|l| l.front()).copied();
        let Some(base) = base else {
            self.record(name, now);
            return Rate::default();
        };
        let span = now.at.duration_since(base.at);
        if span < MIN_SPAN {
            return Rate::default();
        }
        let per_sec = |a: u64, b: u64| a.saturating_sub(b) as f64 / span.as_secs_f64();
        Rate {
            calls: per_sec(now.calls, base.calls),
            attempts: per_sec(now.attempts, base.attempts),
            permits: per_sec(now.permits, base.permits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(calls: u64) -> Look {
        Look { at: Instant::now(), calls, attempts: calls * 2, permits: calls }
    }

    /// Calls made before the first page view count from the moment the
    /// rates began, and later only the last window's calls count.
    #[tokio::test(start_paused = true)]
    async fn the_first_look_shows_the_calls_since_the_rates_began_and_later_only_the_window() {
        let rates = Rates::default();
        rates.record("pay", look(0));
        tokio::time::advance(Duration::from_secs(2)).await;
        let first = rates.rate("pay", look(30));
        assert_eq!(
            first,
            Rate { calls: 15.0, attempts: 30.0, permits: 15.0 },
            "30 calls over the 2 s since the start"
        );

        // A steady 10 calls a second for 30 s, sampled every step: the rate
        // is the window's, not the average since the start.
        let mut calls = 30;
        for _ in 0..30 {
            tokio::time::advance(STEP).await;
            calls += 10;
            rates.record("pay", look(calls));
        }
        assert_eq!(rates.rate("pay", look(calls)).calls, 10.0);
        // Then nothing for a window: 0.
        for _ in 0..12 {
            tokio::time::advance(STEP).await;
            rates.record("pay", look(calls));
        }
        assert_eq!(rates.rate("pay", look(calls)), Rate::default());
        assert_eq!(rates.rate("sms", look(5)), Rate::default(), "a system seen for the first time");
    }
}
