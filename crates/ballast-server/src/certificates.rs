//! The client certificates systems present, over time: every minute each
//! system's TLS files are looked at (a rotation is taken even by a system
//! nobody calls), and a certificate that ends within 14 days, then within
//! a day, is alerted through the configured webhooks — once per
//! certificate and threshold across the fleet, the alert task's key
//! naming both — and logged.

use std::time::{Duration, SystemTime};

use ballast_http::Systems;
use ballast_queue::Queue;
use tokio_util::sync::CancellationToken;

use crate::alerts::{CertExpiring, Webhooks};

/// How often the certificates are looked at.
const EVERY: Duration = Duration::from_secs(60);

/// The thresholds alerted, and their names in the alert's key.
const AHEAD: [(Duration, &str); 2] =
    [(ballast_tls::EXPIRY_WARNING, "14d"), (Duration::from_secs(24 * 3600), "1d")];

/// Looks at the systems' certificates until `shutdown`.
pub(crate) async fn watch(systems: Systems, queue: Queue, webhooks: Webhooks, shutdown: CancellationToken) {
    let mut every = tokio::time::interval(EVERY);
    let mut alerted = std::collections::HashSet::new();
    while shutdown.run_until_cancelled(every.tick()).await.is_some() {
        for system in systems.all() {
            system.refresh_tls();
            let Some(facts) = system.client_cert() else { continue };
            let now = SystemTime::now();
            let Some((_, ahead)) = AHEAD.iter().rev().find(|(within, _)| facts.remaining(now) < *within)
            else {
                continue;
            };
            let key = format!("tls-client-cert-expiry/{}/{}/{ahead}", system.name(), facts.serial);
            if !alerted.insert(key.clone()) {
                continue;
            }
            let expiring = CertExpiring {
                system: system.name().to_owned(),
                subject: facts.subject.clone(),
                serial: facts.serial.clone(),
                not_after: facts.not_after,
                at: now,
            };
            tracing::warn!(system = system.name(), "{}", expiring.summary());
            for task in webhooks.cert_expiring(&expiring, &key) {
                if let Err(error) = queue.enqueue(task).await {
                    tracing::error!(%error, system = system.name(), "cannot store the certificate's expiry alert");
                    alerted.remove(&key);
                }
            }
        }
    }
}
