//! [`PolicyBuilder`]: a policy's parts — retry, breaker, bulkhead, rate
//! limit, timeout, budget, listeners — checked against the guide's rules
//! before a [`Policy`] is built; a refusal names the rule it breaks.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::{Breaker, CircuitBreaker};
use crate::budget::RetryBudget;
use crate::bulkhead::{Bulkhead, BulkheadState};
use crate::events::{Emitter, Listener};
use crate::policy::{Policy, WINDOW_ERROR, WINDOW_WARNING};
use crate::policy_state::PolicyState;
use crate::rate_limit::{RateLimit, RateLimiter};
use crate::retry::Retry;
use crate::rules::{BuildError, Rule, Severity, Violation};
use crate::timeline::Timeline;
use crate::timeout::Timeout;

/// Builds a [`Policy`]; see [`Policy::builder`].
#[derive(Clone, derive_setters::Setters)]
#[setters(generate = false)]
pub struct PolicyBuilder {
    name: Arc<str>,
    /// Retry settings (default: [`Retry::default`]).
    #[setters(generate)]
    retry: Retry,
    /// A circuit breaker (default: none).
    #[setters(generate, strip_option)]
    breaker: Option<Breaker>,
    /// A bulkhead (default: none).
    #[setters(generate, strip_option)]
    bulkhead: Option<Bulkhead>,
    /// A rate limit on the attempts sent (default: none): per attempt,
    /// beside the bulkhead, inside the breaker — retries take permits too.
    #[setters(generate, strip_option)]
    rate_limit: Option<RateLimit>,
    /// Attempt timeout and total deadline (default: [`Timeout::default`]).
    #[setters(generate)]
    timeout: Timeout,
    listeners: Vec<Arc<dyn Listener>>,
    /// Seeds the jitter, so a run's delays can be replayed (default: random).
    #[setters(generate, strip_option)]
    seed: Option<u64>,
}

impl std::fmt::Debug for PolicyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyBuilder")
            .field("name", &self.name)
            .field("retry", &self.retry)
            .field("breaker", &self.breaker)
            .field("bulkhead", &self.bulkhead)
            .field("rate_limit", &self.rate_limit)
            .field("timeout", &self.timeout)
            .field("listeners", &self.listeners.len())
            .field("seed", &self.seed)
            .finish()
    }
}

impl PolicyBuilder {
    pub(crate) fn new(system: String) -> Self {
        PolicyBuilder {
            name: Arc::from(system),
            retry: Retry::default(),
            breaker: None,
            bulkhead: None,
            rate_limit: None,
            timeout: Timeout::default(),
            listeners: Vec::new(),
            seed: None,
        }
    }

    /// Adds an event listener.
    #[must_use]
    pub fn listener(mut self, listener: impl Listener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Adds a shared event listener.
    #[must_use]
    pub fn shared_listener(mut self, listener: Arc<dyn Listener>) -> Self {
        self.listeners.push(listener);
        self
    }

    /// The worst-case in-memory window: every attempt waiting the longest
    /// for its permit and timing out, plus the longest backoff before each
    /// retry, bounded by the total deadline; the end of the
    /// [`timeline`](Self::timeline).
    pub fn worst_case(&self) -> Duration {
        self.timeline().window
    }

    /// The worst case of a call, attempt by attempt (what `ballast explain` prints).
    pub fn timeline(&self) -> Timeline {
        Timeline::new(&self.retry, &self.timeout, self.permit_wait())
    }

    fn permit_wait(&self) -> Duration {
        self.rate_limit.map_or(Duration::ZERO, |l| l.get_wait())
    }

    /// Every finding — errors, warnings and notes — without building.
    pub fn check(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        self.retry.check(&mut out);
        self.timeout.check(&mut out);
        if let Some(b) = &self.breaker {
            b.check(&mut out);
        }
        if let Some(b) = &self.bulkhead {
            b.check(&mut out);
        }
        if let Some(l) = &self.rate_limit {
            l.check(&mut out);
        }
        let window = self.worst_case();
        if window > WINDOW_ERROR {
            out.push(Violation::error(
                Some(Rule::Re4),
                "retry",
                format!("the worst-case in-memory window is {window:.1?}, over the 30 s limit"),
                "lower max_attempts, the attempt timeout or max_delay, or set a total deadline; \
                 hand longer outages to the durable task queue",
            ));
        } else if window > WINDOW_WARNING {
            out.push(Violation::warning(
                Rule::Re4,
                "retry",
                format!("the worst-case in-memory window is {window:.1?}, over 5 s"),
                "in-memory retry is for blips under ~5 s; consider handing keyed writes to the durable task queue",
            ));
        }
        out
    }

    /// Builds the policy, or returns every error at once, each naming its
    /// rule. Warnings stay available from [`Policy::warnings`].
    pub fn build(self) -> Result<Policy, BuildError> {
        let findings = self.check();
        let (errors, warnings): (Vec<_>, Vec<_>) =
            findings.into_iter().partition(|v| v.severity == Severity::Error);
        if !errors.is_empty() {
            return Err(BuildError { violations: errors });
        }
        let seed = self.seed.unwrap_or_else(rand::random);
        let worst_case = self.worst_case();
        let events = Emitter::new(self.name.clone(), self.listeners);
        Ok(Policy {
            shared: Arc::new(PolicyState {
                breaker: self.breaker.map(|b| CircuitBreaker::new(b, events.clone(), seed ^ 0xB4EA_CE55)),
                bulkhead: self.bulkhead.map(|b| std::sync::Arc::new(BulkheadState::new(b))),
                rate_limit: self.rate_limit.map(|l| RateLimiter::new(l, events.clone())),
                budget: self.retry.get_budget().map(|b| RetryBudget::new(*b)),
                retry: self.retry,
                timeout: self.timeout,
                events,
                warnings,
                worst_case,
                seed,
                calls: AtomicU64::new(0),
                nested_warned: AtomicBool::new(false),
            }),
        })
    }
}
