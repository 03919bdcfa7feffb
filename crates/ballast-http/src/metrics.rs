//! Prometheus metrics through the `metrics` facade.
//!
//! Every handle is registered once per system, when [`SystemMetrics::register`]
//! or [`HttpSystem`](crate::HttpSystem) is built, so recording a call costs a
//! few atomic adds and no allocation. Install your recorder (e.g.
//! `metrics-exporter-prometheus`) **before** registering: handles taken earlier
//! record nowhere.
//!
//! | metric | labels | recorded by |
//! |---|---|---|
//! | `ballast_calls_total` | system, kind, outcome (`ok`, `permanent`, `transient`, `rejected`, `cancelled`) | [`SystemMetrics`] |
//! | `ballast_attempts_total` | system, outcome (`ok`, `transient`, `permanent`, `timeout`) | [`SystemMetrics`] |
//! | `ballast_retries_total` | system | [`SystemMetrics`] |
//! | `ballast_giveups_total` | system, reason ([`StopReason::as_str`]) | [`SystemMetrics`] |
//! | `ballast_breaker_state` | system (0 closed, 1 half-open, 2 open, 3 isolated) | [`SystemMetrics`] |
//! | `ballast_breaker_transitions_total` | system, to | [`SystemMetrics`] |
//! | `ballast_bulkhead_rejections_total` | system | [`SystemMetrics`] |
//! | `ballast_bulkhead_in_flight` | system | `HttpSystem`, `PolicyLayer` |
//! | `ballast_call_duration_seconds` | system (histogram) | `HttpSystem`, `PolicyLayer` |
//! | `ballast_bulkhead_limit` | system: attempts allowed in flight (absent without a bulkhead) | `HttpSystem` |
//! | `ballast_rate_limited_total` | system: attempts not sent for want of a rate-limit permit | [`SystemMetrics`] |
//! | `ballast_route_calls_total` | system, route (the template, `POST /payments/{id}`: never a raw path), outcome (`ok`, `failed` — an answer judged a failure —, `unanswered`) | `HttpSystem`, for calls a route matched |
//! | `ballast_rate_limit_permits_per_second` | system: the rate limit's rate now (absent without one) | `HttpSystem`, [`SystemMetrics`], [`record_rate_limit`] |
//! | `ballast_rate_limit_hold_seconds` | system: how long the system's own word (`Retry-After`, a spent quota) still holds every attempt; 0 when it does not | `HttpSystem`, [`record_rate_limit`] |
//! | `ballast_system_critical` | system: 1 if readiness depends on it, else 0 | `HttpSystem` |
//!
//! `metrics-exporter-prometheus` renders a histogram as a summary unless it
//! is given buckets; give it [`CALL_DURATION_BUCKETS`] for
//! `ballast_call_duration_seconds`, so quantiles can be taken over several
//! instances (`histogram_quantile` over `ballast_call_duration_seconds_bucket`,
//! as the dashboard in `examples/monitoring` does). `ballast serve` does.

use std::sync::Arc;
use std::time::Duration;

use ballast::{BreakerState, Class, Event, EventKind, Listener, OpKind, StopReason};
use metrics::{Counter, Gauge, Histogram, Unit};

// Label values, each array indexed by the matching `*_index` function below.
const KINDS: [OpKind; 3] = [OpKind::Read, OpKind::KeyedWrite, OpKind::WriteOnce];
const CALL_OUTCOMES: [&str; 5] = ["ok", "permanent", "transient", "rejected", "cancelled"];
const ATTEMPT_OUTCOMES: [&str; 4] = ["ok", "transient", "permanent", "timeout"];
const REASONS: [StopReason; 9] = [
    StopReason::Permanent,
    StopReason::Exhausted,
    StopReason::NotRetryable,
    StopReason::BudgetExhausted,
    StopReason::DeadlineWouldOverrun,
    StopReason::TotalTimeout,
    StopReason::Rejected,
    StopReason::Cancelled,
    StopReason::Nested,
];
const STATES: [BreakerState; 4] =
    [BreakerState::Closed, BreakerState::HalfOpen, BreakerState::Open, BreakerState::Isolated];

/// The name of every metric this crate records, for checking dashboards and
/// alerting rules against what the code registers.
pub const NAMES: [&str; 15] = [
    "ballast_calls_total",
    "ballast_attempts_total",
    "ballast_retries_total",
    "ballast_giveups_total",
    "ballast_breaker_state",
    "ballast_breaker_transitions_total",
    "ballast_bulkhead_in_flight",
    "ballast_bulkhead_rejections_total",
    "ballast_call_duration_seconds",
    "ballast_bulkhead_limit",
    "ballast_system_critical",
    "ballast_rate_limited_total",
    "ballast_rate_limit_permits_per_second",
    "ballast_rate_limit_hold_seconds",
    "ballast_route_calls_total",
];

/// Upper bounds, in seconds, of the `ballast_call_duration_seconds` buckets:
/// a whole call, retries and backoff included, which R-RES-RE-4 keeps under
/// 30 s in memory.
pub const CALL_DURATION_BUCKETS: [f64; 13] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0];

/// Describes every ballast metric (help text and unit) to the installed
/// recorder. Optional; call it once after installing the recorder.
pub fn describe() {
    metrics::describe_counter!("ballast_calls_total", "Calls through a policy, by kind and outcome");
    metrics::describe_counter!("ballast_attempts_total", "Attempts (the first included), by outcome");
    metrics::describe_counter!("ballast_retries_total", "Retries scheduled");
    metrics::describe_counter!("ballast_giveups_total", "Calls that stopped without success, by reason");
    metrics::describe_gauge!("ballast_breaker_state", "0 closed, 1 half-open, 2 open, 3 isolated");
    metrics::describe_counter!("ballast_breaker_transitions_total", "Breaker state changes, by new state");
    metrics::describe_gauge!("ballast_bulkhead_in_flight", "Attempts in flight");
    metrics::describe_counter!("ballast_bulkhead_rejections_total", "Calls refused by a full bulkhead");
    metrics::describe_histogram!(
        "ballast_call_duration_seconds",
        Unit::Seconds,
        "Duration of a whole call, retries and waits included"
    );
    metrics::describe_gauge!("ballast_bulkhead_limit", "Attempts allowed in flight");
    metrics::describe_gauge!("ballast_system_critical", "1 if readiness depends on the system, else 0");
    metrics::describe_counter!(
        "ballast_rate_limited_total",
        "Attempts not sent for want of a rate-limit permit"
    );
    metrics::describe_gauge!("ballast_rate_limit_permits_per_second", "The rate limit's rate now");
    metrics::describe_gauge!(
        "ballast_rate_limit_hold_seconds",
        Unit::Seconds,
        "How long the system's Retry-After or spent quota still holds every attempt"
    );
    metrics::describe_counter!("ballast_route_calls_total", "Calls to a declared route, by outcome");
    metrics::describe_gauge!(
        "ballast_tls_client_cert_expiry_timestamp_seconds",
        Unit::Seconds,
        "When the client certificate a system presents expires (Unix time)"
    );
    metrics::describe_counter!(
        "ballast_token_requests_total",
        "Requests to a system's OAuth 2.0 token endpoint, by outcome (ok, failed)"
    );
}

/// Sets `ballast_tls_client_cert_expiry_timestamp_seconds` of `system` to
/// the end of `facts`' validity.
pub(crate) fn client_cert_expiry(system: &str, facts: &ballast_tls::CertFacts) {
    let secs = facts.not_after.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!("ballast_tls_client_cert_expiry_timestamp_seconds", "system" => system.to_owned())
        .set(secs);
}

/// The outcomes of `ballast_route_calls_total`.
const ROUTE_OUTCOMES: [&str; 3] = ["ok", "failed", "unanswered"];

/// The call counters of one system's routes, registered once, in the
/// routes' order.
#[derive(Debug, Clone, Default)]
pub(crate) struct RouteCounters(Vec<[Counter; ROUTE_OUTCOMES.len()]>);

impl RouteCounters {
    pub(crate) fn register(system: &str, routes: &crate::routes::Routes) -> Self {
        Self(
            routes
                .iter()
                .map(|route| {
                    ROUTE_OUTCOMES.map(|outcome| {
                        metrics::counter!("ballast_route_calls_total", "system" => system.to_owned(), "route" => route.name().to_owned(), "outcome" => outcome)
                    })
                })
                .collect(),
        )
    }

    /// A call to route `index` ended: answered `ok`, answered with a
    /// failure, or without an answer.
    pub(crate) fn record(&self, index: usize, answered: Option<bool>) {
        let outcome = match answered {
            Some(true) => 0,
            Some(false) => 1,
            None => 2,
        };
        if let Some(counters) = self.0.get(index) {
            counters[outcome].increment(1);
        }
    }
}

/// Records a rate limit's state now — its rate
/// (`ballast_rate_limit_permits_per_second`) and how long the system's word
/// still holds every attempt (`ballast_rate_limit_hold_seconds`): an adaptive
/// limit's rate climbs and its hold runs out between the events that set
/// them, so a sampler (`ballast serve`'s, every second) records them too.
pub fn record_rate_limit(system: &str, limiter: &ballast::RateLimiter) {
    let now = limiter.snapshot();
    record_rate(system, now.rate);
    metrics::gauge!("ballast_rate_limit_hold_seconds", "system" => system.to_owned())
        .set(now.held_for.as_secs_f64());
}

fn record_rate(system: &str, rate: f64) {
    metrics::gauge!("ballast_rate_limit_permits_per_second", "system" => system.to_owned()).set(rate);
}

/// Records what a system is configured with: its bulkhead limit, its rate
/// limit and whether it is critical.
pub(crate) fn describe_system(system: &str, policy: &ballast::Policy, critical: bool) {
    if let Some(limiter) = policy.rate_limiter() {
        record_rate_limit(system, limiter);
    }
    if let Some(limit) = policy.bulkhead_limit() {
        metrics::gauge!("ballast_bulkhead_limit", "system" => system.to_owned()).set(limit as f64);
    }
    metrics::gauge!("ballast_system_critical", "system" => system.to_owned()).set(if critical {
        1.0
    } else {
        0.0
    });
}

/// The event-driven metrics of one system: a [`Listener`] to give to
/// [`Policy::builder(..).listener(..)`](ballast::PolicyBuilder::listener).
///
/// ```
/// use ballast::Policy;
/// use ballast_http::metrics::SystemMetrics;
///
/// // after installing the Prometheus recorder:
/// let policy = Policy::builder("sber").listener(SystemMetrics::register("sber")).build().unwrap();
/// # let _ = policy;
/// ```
#[derive(Clone)]
pub struct SystemMetrics {
    handles: Arc<Handles>,
}

struct Handles {
    system: String,
    calls: [[Counter; CALL_OUTCOMES.len()]; KINDS.len()],
    attempts: [Counter; ATTEMPT_OUTCOMES.len()],
    retries: Counter,
    giveups: [Counter; REASONS.len()],
    breaker_state: Gauge,
    transitions: [Counter; STATES.len()],
    bulkhead_rejections: Counter,
    rate_limited: Counter,
}

impl std::fmt::Debug for SystemMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemMetrics").field("system", &self.handles.system).finish_non_exhaustive()
    }
}

impl SystemMetrics {
    /// Registers every handle of `system` with the current recorder.
    pub fn register(system: &str) -> Self {
        let s = || system.to_owned();
        let handles = Handles {
            system: s(),
            calls: KINDS.map(|kind| {
                CALL_OUTCOMES.map(|outcome| {
                    metrics::counter!("ballast_calls_total", "system" => s(), "kind" => kind.as_str(), "outcome" => outcome)
                })
            }),
            attempts: ATTEMPT_OUTCOMES
                .map(|outcome| metrics::counter!("ballast_attempts_total", "system" => s(), "outcome" => outcome)),
            retries: metrics::counter!("ballast_retries_total", "system" => s()),
            giveups: REASONS.map(|reason| {
                metrics::counter!("ballast_giveups_total", "system" => s(), "reason" => reason.as_str())
            }),
            breaker_state: metrics::gauge!("ballast_breaker_state", "system" => s()),
            transitions: STATES.map(|to| {
                metrics::counter!("ballast_breaker_transitions_total", "system" => s(), "to" => to.as_str())
            }),
            bulkhead_rejections: metrics::counter!("ballast_bulkhead_rejections_total", "system" => s()),
            rate_limited: metrics::counter!("ballast_rate_limited_total", "system" => s()),
        };
        handles.breaker_state.set(0.0);
        Self { handles: Arc::new(handles) }
    }

    fn call(&self, op: OpKind, outcome: usize) {
        let kind = match op {
            OpKind::Read => 0,
            OpKind::KeyedWrite => 1,
            OpKind::WriteOnce => 2,
        };
        self.handles.calls[kind][outcome].increment(1);
    }

    fn breaker(&self, to: BreakerState) {
        self.handles.breaker_state.set(f64::from(to.as_u8()));
        self.handles.transitions[usize::from(to.as_u8())].increment(1);
    }
}

impl Listener for SystemMetrics {
    fn on_event(&self, event: &Event<'_>) {
        let h = &self.handles;
        match event.kind {
            EventKind::AttemptFailed { timed_out: true, .. } => h.attempts[3].increment(1),
            EventKind::AttemptFailed { class: Class::Transient, .. } => h.attempts[1].increment(1),
            EventKind::AttemptFailed { class: Class::Permanent, .. } => h.attempts[2].increment(1),
            EventKind::RetryScheduled { .. } => h.retries.increment(1),
            EventKind::Succeeded { op, .. } => {
                h.attempts[0].increment(1);
                self.call(op, 0);
            }
            EventKind::GaveUp { op, reason, .. } => {
                let (i, outcome) = reason_index(reason);
                h.giveups[i].increment(1);
                self.call(op, outcome);
            }
            EventKind::BreakerOpened { .. } => self.breaker(BreakerState::Open),
            EventKind::BreakerHalfOpened => self.breaker(BreakerState::HalfOpen),
            EventKind::BreakerClosed => self.breaker(BreakerState::Closed),
            EventKind::BreakerIsolated => self.breaker(BreakerState::Isolated),
            EventKind::BulkheadRejected => h.bulkhead_rejections.increment(1),
            EventKind::RateLimited { .. } => h.rate_limited.increment(1),
            // Rare, and only for systems with a limit: registered here, so
            // systems without one have no such series.
            EventKind::RateChanged { rate } => record_rate(&h.system, rate),
            _ => {}
        }
    }
}

/// A stop reason's index in [`REASONS`], and the index in [`CALL_OUTCOMES`]
/// of the call outcome it means: what the caller has to do differently.
fn reason_index(reason: StopReason) -> (usize, usize) {
    const PERMANENT: usize = 1;
    const TRANSIENT: usize = 2;
    match reason {
        StopReason::Permanent => (0, PERMANENT),
        StopReason::Exhausted => (1, TRANSIENT),
        // The policy's own events say not_retryable for both: the HTTP
        // integration tells them apart only on the failure it returns.
        StopReason::NotRetryable | StopReason::NotDeduplicated => (2, TRANSIENT),
        StopReason::BudgetExhausted => (3, TRANSIENT),
        StopReason::DeadlineWouldOverrun => (4, TRANSIENT),
        StopReason::TotalTimeout => (5, TRANSIENT),
        StopReason::Rejected => (6, 3),
        StopReason::Cancelled => (7, 4),
        StopReason::Nested => (8, TRANSIENT),
    }
}

/// The handles the HTTP integration records itself: call duration and
/// attempts in flight (the policy's events carry neither).
#[derive(Debug, Clone)]
pub(crate) struct CallMetrics {
    duration: Histogram,
    in_flight: Gauge,
}

impl CallMetrics {
    pub(crate) fn register(system: &str) -> Self {
        Self {
            duration: metrics::histogram!("ballast_call_duration_seconds", "system" => system.to_owned()),
            in_flight: metrics::gauge!("ballast_bulkhead_in_flight", "system" => system.to_owned()),
        }
    }

    pub(crate) fn call_took(&self, duration: Duration) {
        self.duration.record(duration.as_secs_f64());
    }

    /// Counts an attempt in flight until the guard drops — also when an
    /// aggressive timeout drops the attempt.
    pub(crate) fn attempt_in_flight(&self) -> InFlight {
        self.in_flight.increment(1.0);
        InFlight(self.in_flight.clone())
    }
}

/// One attempt in flight; see [`CallMetrics::attempt_in_flight`].
pub(crate) struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stop_reason_has_its_own_label_and_a_call_outcome() {
        for (i, reason) in REASONS.into_iter().enumerate() {
            let (index, outcome) = reason_index(reason);
            assert_eq!(index, i, "{reason:?}");
            assert_ne!(CALL_OUTCOMES[outcome], "ok", "{reason:?}");
        }
        assert_eq!(CALL_OUTCOMES[reason_index(StopReason::Rejected).1], "rejected");
        assert_eq!(CALL_OUTCOMES[reason_index(StopReason::Permanent).1], "permanent");
    }
}
