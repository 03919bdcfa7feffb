//! Calls and attempts per second per system, from the running totals of
//! each [`HttpSystem`](ballast_http::HttpSystem): the difference between two
//! looks, divided by the time between them. Sampled only when someone looks.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ballast_http::HttpSystem;

/// Below this, two looks are too close to divide by.
const MIN_SPAN: Duration = Duration::from_secs(1);

/// A system's totals at one look.
#[derive(Debug, Clone, Copy)]
struct Look {
    at: Instant,
    calls: u64,
    attempts: u64,
}

/// Per second, over the span between two looks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Rate {
    pub calls: f64,
    pub attempts: f64,
}

#[derive(Default)]
struct State {
    /// The look rates are measured from.
    base: HashMap<String, Look>,
    /// The rates as of the last look at least `MIN_SPAN` after its base.
    last: HashMap<String, Rate>,
}

/// The rates of every system, remembered between page views.
#[derive(Default)]
pub(super) struct Rates(Mutex<State>);

impl Rates {
    /// The rate of `system` now; updates the base once it is old enough.
    pub(super) fn of(&self, system: &HttpSystem) -> Rate {
        let stats = system.stats();
        let now = Look { at: Instant::now(), calls: stats.calls, attempts: stats.attempts };
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let name = system.name();
        let Some(base) = state.base.get(name).copied() else {
            state.base.insert(name.to_owned(), now);
            return Rate::default();
        };
        let span = now.at.saturating_duration_since(base.at);
        if span < MIN_SPAN {
            return state.last.get(name).copied().unwrap_or_default();
        }
        let per_sec = |a: u64, b: u64| a.saturating_sub(b) as f64 / span.as_secs_f64();
        let rate =
            Rate { calls: per_sec(now.calls, base.calls), attempts: per_sec(now.attempts, base.attempts) };
        state.base.insert(name.to_owned(), now);
        state.last.insert(name.to_owned(), rate);
        rate
    }
}
