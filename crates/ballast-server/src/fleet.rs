//! `ballast serve` in a fleet: on a PostgreSQL queue, every replica joins
//! the fleet ([`ballast_fleet`]) — registers, heartbeats, feeds the
//! systems' fleet-wide rate limits and holds their fleet-wide breakers —
//! and its dashboard shows the fleet. On SQLite a replica is alone.

use std::sync::Arc;

use ballast_fleet::{Fleet, Identity, Member, Members};
use ballast_http::Systems;
use sha2::{Digest, Sha256};

/// The systems of this replica, as the fleet reads them: a reload that
/// replaces a system replaces what the fleet keeps for it too.
pub(crate) struct SystemsMembers(pub Systems);

impl Members for SystemsMembers {
    fn members(&self) -> Vec<Member> {
        self.0
            .all()
            .into_iter()
            .map(|system| {
                let stats = system.stats();
                Member {
                    name: system.name().to_owned(),
                    policy: system.policy().clone(),
                    calls: stats.calls,
                    sent: stats.attempts,
                    refused: stats.refused,
                    throttled: stats.throttled,
                    breaker: system.breaker_state(),
                }
            })
            .collect()
    }
}

/// A digest of the configuration's text: replicas that loaded another file
/// are flagged (drift).
pub(crate) fn digest(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Joins the fleet of `url` as this process, with `admin` its admin address.
pub(crate) async fn join(
    url: &str,
    config_text: &str,
    admin: String,
) -> Result<Fleet, ballast_fleet::FleetError> {
    let me = Identity {
        host: hostname(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_digest: digest(config_text),
        admin,
        queue_schema: Some(ballast_queue::SCHEMA),
    };
    Fleet::join(url, me).await
}

/// This host's name, as the kernel has it (Linux), else `$HOSTNAME`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The members adapter, shared.
pub(crate) fn members(systems: &Systems) -> Arc<dyn Members> {
    Arc::new(SystemsMembers(systems.clone()))
}
