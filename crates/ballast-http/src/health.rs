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
    /// One entry per system, in the order added.
    pub systems: Vec<SystemHealth>,
}

/// The health of one external system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemHealth {
    /// The system's name.
    pub system: String,
    /// Whether readiness depends on it.
    pub critical: bool,
    /// Its breaker's state; `None` without a breaker.
    pub state: Option<BreakerState>,
    /// Seconds spent in that state; `None` without a breaker.
    pub since_secs: Option<f64>,
    /// When open: seconds until a probe is let through.
    pub next_probe_in_secs: Option<f64>,
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
        let systems = self
            .systems
            .iter()
            .map(|w| {
                let breaker = w.policy.breaker();
                SystemHealth {
                    system: w.policy.name().to_owned(),
                    critical: w.critical,
                    state: breaker.map(|b| b.state()),
                    since_secs: breaker.map(|b| b.in_state_for().as_secs_f64()),
                    next_probe_in_secs: breaker.and_then(|b| b.next_probe_in()).map(|d| d.as_secs_f64()),
                }
            })
            .collect();
        HealthReport { ready: self.ready(), systems }
    }
}

fn is_down(breaker: &CircuitBreaker) -> bool {
    match breaker.state() {
        BreakerState::Isolated => true,
        BreakerState::Open => breaker.next_probe_in().is_some_and(|wait| !wait.is_zero()),
        BreakerState::Closed | BreakerState::HalfOpen => false,
    }
}
