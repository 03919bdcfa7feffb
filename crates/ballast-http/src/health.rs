//! Readiness from breaker states: the service is not ready while the breaker
//! of a system it cannot work without is open. Liveness never looks at
//! external systems — restarting the service does not heal a sick gateway.

use ballast::{BreakerState, CircuitBreaker, Policy};
use serde::{Deserialize, Serialize};

use crate::HttpSystem;

/// Readiness and liveness of a service, from the policies of the external
/// systems it calls.
///
/// ```
/// use ballast::{Breaker, Policy};
/// use ballast_http::Health;
///
/// let sber = Policy::builder("sber").breaker(Breaker::consecutive(5)).build().unwrap();
/// let sms = Policy::builder("sms").breaker(Breaker::consecutive(5)).build().unwrap();
/// let health = Health::new().policy(&sber, true).policy(&sms, false);
///
/// sms.breaker().unwrap().isolate(); // not critical: still ready
/// assert!(health.ready());
/// sber.breaker().unwrap().isolate();
/// assert!(!health.ready());
/// assert!(health.live());
/// let json = serde_json::to_value(health.report()).unwrap();
/// assert_eq!(json["systems"][0]["state"], "isolated");
/// assert_eq!(json["systems"][0]["status"], "unavailable");
/// assert_eq!(json["status"], "unavailable");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Health {
    systems: Vec<Watched>,
}

#[derive(Debug, Clone)]
struct Watched {
    policy: Policy,
    critical: bool,
}

/// The health of every watched system, serializable as the JSON body of a
/// readiness endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthReport {
    /// Whether no critical system's breaker is open or isolated.
    pub ready: bool,
    /// The worst status of any system; `up` when none is watched.
    pub status: SystemStatus,
    /// One entry per system, in the order added.
    pub systems: Vec<SystemHealth>,
}

/// How usable an external system is now, from its breaker and rate limiter.
///
/// Ordered from best to worst, so the worst of several is their `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemStatus {
    /// Calls go through: the breaker is closed (or there is none) and
    /// nothing the system said holds them.
    Up,
    /// Calls go through in part: the breaker is half-open or about to
    /// probe, or the system's own word (a `Retry-After`, a spent quota)
    /// holds them for a while. Keyed writes are deferred, not lost.
    Degraded,
    /// Calls are refused unsent: the breaker is open (until its next probe)
    /// or isolated. Keyed writes are deferred; reads and unkeyed writes fail.
    Unavailable,
}

impl SystemStatus {
    /// `up`, `degraded` or `unavailable`, as reports spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            SystemStatus::Up => "up",
            SystemStatus::Degraded => "degraded",
            SystemStatus::Unavailable => "unavailable",
        }
    }
}

/// The health of one external system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemHealth {
    /// The system's name.
    pub system: String,
    /// Whether readiness depends on it.
    pub critical: bool,
    /// How usable it is now.
    pub status: SystemStatus,
    /// Its breaker's state; `None` without a breaker.
    pub state: Option<BreakerState>,
    /// Seconds spent in that state; `None` without a breaker.
    pub since_secs: Option<f64>,
    /// When open: seconds until a probe is let through.
    pub next_probe_in_secs: Option<f64>,
    /// A rate limit the fleet shares (`scope = "fleet"`): whether this
    /// replica takes its permits from the fleet's bucket or, the fleet's
    /// database away, holds its share on its own. `None` for a local limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet_limit: Option<FleetLimit>,
}

/// How a fleet-wide rate limit is held on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetLimit {
    /// Permits come from the fleet's bucket.
    Shared,
    /// The fleet's bucket cannot be reached: this replica holds the
    /// fleet's rate over the replicas last seen on its own.
    Degraded,
}

impl Health {
    /// Watches nothing yet: ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Watches every system, critical as each was built.
    pub fn from_systems<'a>(systems: impl IntoIterator<Item = &'a HttpSystem>) -> Self {
        systems.into_iter().fold(Self::new(), Self::system)
    }

    /// Watches an HTTP system, critical as it was built.
    pub fn system(self, system: &HttpSystem) -> Self {
        self.policy(system.policy(), system.is_critical())
    }

    /// Watches a policy; `critical` systems decide readiness.
    pub fn policy(mut self, policy: &Policy, critical: bool) -> Self {
        self.systems.push(Watched { policy: policy.clone(), critical });
        self
    }

    /// Ready unless a critical system's breaker is open or isolated. A
    /// half-open breaker is ready: its probes are how the system comes back.
    /// So is an open one whose probe time has come (it moves to half-open on
    /// its next call), or a service whose traffic waits for readiness would
    /// never send the probe that closes it.
    pub fn ready(&self) -> bool {
        self.systems.iter().filter(|w| w.critical).all(|w| !w.policy.breaker().is_some_and(is_down))
    }

    /// Always true: liveness must not depend on external systems, or an
    /// outage of one would restart every instance of this service.
    pub fn live(&self) -> bool {
        true
    }

    /// Per-system state, since when, and the next probe.
    pub fn report(&self) -> HealthReport {
        let systems: Vec<SystemHealth> = self
            .systems
            .iter()
            .map(|w| {
                let breaker = w.policy.breaker();
                SystemHealth {
                    system: w.policy.name().to_owned(),
                    critical: w.critical,
                    status: status(&w.policy),
                    state: breaker.map(|b| b.state()),
                    since_secs: breaker.map(|b| b.in_state_for().as_secs_f64()),
                    next_probe_in_secs: breaker.and_then(|b| b.next_probe_in()).map(|d| d.as_secs_f64()),
                    fleet_limit: w.policy.rate_limiter().and_then(|r| r.shared()).map(|shared| {
                        if shared.is_degraded() {
                            FleetLimit::Degraded
                        } else {
                            FleetLimit::Shared
                        }
                    }),
                }
            })
            .collect();
        let status = systems.iter().map(|s| s.status).max().unwrap_or(SystemStatus::Up);
        HealthReport { ready: self.ready(), status, systems }
    }

    /// Whether any critical system is [`SystemStatus::Unavailable`]: what
    /// an app that cannot work without a system (and cannot defer its
    /// writes) makes its readiness depend on.
    pub fn critical_unavailable(&self) -> bool {
        self.systems.iter().any(|w| w.critical && status(&w.policy) == SystemStatus::Unavailable)
    }
}

fn status(policy: &Policy) -> SystemStatus {
    let breaker = policy.breaker().map(|b| (b.state(), is_down(b)));
    let held = policy.rate_limiter().is_some_and(|r| !r.snapshot().held_for.is_zero());
    match breaker {
        Some((_, true)) => SystemStatus::Unavailable,
        Some((BreakerState::HalfOpen | BreakerState::Open | BreakerState::Isolated, false)) => {
            SystemStatus::Degraded
        }
        _ if held => SystemStatus::Degraded,
        _ => SystemStatus::Up,
    }
}

fn is_down(breaker: &CircuitBreaker) -> bool {
    match breaker.state() {
        BreakerState::Isolated => true,
        BreakerState::Open => breaker.next_probe_in().is_some_and(|wait| !wait.is_zero()),
        BreakerState::Closed | BreakerState::HalfOpen => false,
    }
}
