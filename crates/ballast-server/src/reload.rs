//! Reloading the configuration without a restart: on SIGHUP the file is
//! read and checked again; a file with lint errors is refused (its findings
//! logged, the running systems keep serving), a good one replaces the
//! systems. A system whose section did not change keeps its running policy —
//! breaker state, bulkhead, budget — and its connection pool, but forgets
//! what it learned of its rate limit (an announced rate, a hold); calls in
//! flight finish with the system they started on.
//!
//! Only `[systems.*]` is reloaded; listeners and the queue need a restart.
//! Each system's TLS files are looked at too: a rotated client certificate
//! is taken by the next connection (as it is within a second without a
//! SIGHUP).
//!
//! A reload never strands deliveries: a file that removes a system with
//! unfinished deliveries is refused (naming the system and the count) unless
//! its `[serve] remove_systems` names that system; a file without `[queue]`,
//! or without any system while deliveries wait, is refused too. A delivery
//! whose system is gone after all is held, not failed
//! ([`DeliveryError::UnknownSystem`](ballast_http::DeliveryError::UnknownSystem)).

use std::path::PathBuf;

use ballast_config::{report, Config};
use ballast_http::{Systems, DELIVERY_KIND};
use ballast_queue::Queue;
use tokio_util::sync::CancellationToken;

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Systems whose section did not change: kept as they were running.
    pub kept: Vec<String>,
    /// Systems new or changed: built afresh.
    pub rebuilt: Vec<String>,
    /// Systems no longer in the file.
    pub removed: Vec<String>,
    /// Sections that changed but take a restart to apply.
    pub needs_restart: Vec<&'static str>,
}

/// Why a reload was refused; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file cannot be read or parsed.
    #[error("the configuration cannot be read:\n{0}")]
    Unreadable(String),
    /// The file has lint errors.
    #[error("the configuration has errors; kept the running one:\n{0}")]
    Refused(String),
    /// A system could not be built.
    #[error(transparent)]
    System(#[from] crate::build::BuildError),
    /// The file has no `[queue]`: `ballast serve` could not start on it.
    #[error(
        "the new file has no [queue] section; `ballast serve` cannot run without one (the running queue \
         stays until a restart): put the [queue] section back"
    )]
    NoQueue,
    /// The file would leave unfinished deliveries without their system.
    #[error("{}", stranding_message(.0))]
    WouldStrand(Vec<(String, u64)>),
    /// The unfinished deliveries could not be counted, so removing a system
    /// could not be checked.
    #[error("cannot count the unfinished deliveries of the systems this file removes: {0}")]
    Queue(#[source] ballast_queue::Error),
}

fn stranding_message(stranded: &[(String, u64)]) -> String {
    let named: Vec<String> =
        stranded.iter().map(|(name, n)| format!("{name:?} with {n} unfinished deliveries")).collect();
    let list: Vec<String> = stranded.iter().map(|(name, _)| format!("{name:?}")).collect();
    format!(
        "the new file removes {}; restore the section(s), or name them in `[serve] remove_systems = [{}]` \
         to remove them anyway (their deliveries are then held until the system returns or they reach \
         [queue] max_age)",
        named.join(", "),
        list.join(", ")
    )
}

/// Reads `path` again and, if it lints clean and strands no delivery in
/// `queue`, replaces the systems in `systems`, keeping those whose section
/// equals the one in `current`. Returns the new configuration and what changed.
pub async fn reload(
    path: &std::path::Path,
    current: &Config,
    systems: &Systems,
    queue: &Queue,
) -> Result<(Config, Reloaded), ReloadError> {
    let config =
        Config::load(path).map_err(|e| ReloadError::Unreadable(report::human(&e.findings(), e.input())))?;
    let findings = config.lint();
    if ballast_config::has_errors(&findings) {
        return Err(ReloadError::Refused(report::human(&findings, Some(config.source()))));
    }
    if config.model().queue.is_none() {
        return Err(ReloadError::NoQueue);
    }
    let removed: Vec<String> =
        current.system_names().filter(|n| config.system(n).is_none()).map(str::to_owned).collect();
    if !removed.is_empty() || config.system_names().next().is_none() {
        let waiting = queue.unfinished_by(DELIVERY_KIND, "system").await.map_err(ReloadError::Queue)?;
        let allowed =
            config.model().serve.as_ref().and_then(|s| s.remove_systems.clone()).unwrap_or_default();
        let stranded: Vec<(String, u64)> = waiting
            .into_iter()
            .filter(|(name, n)| *n > 0 && config.system(name).is_none() && !allowed.contains(name))
            .filter(|(name, _)| removed.contains(name) || config.system_names().next().is_none())
            .collect();
        if !stranded.is_empty() {
            return Err(ReloadError::WouldStrand(stranded));
        }
    }
    let mut done = Reloaded::default();
    let mut next = Vec::new();
    for name in config.system_names() {
        match systems.get(name) {
            Some(running) if current.system(name) == config.system(name) => {
                // What the system said of its limit is forgotten: a reload
                // is how an operator clears a hold it should not have asked for.
                if let Some(limiter) = running.policy().rate_limiter() {
                    limiter.reset();
                }
                done.kept.push(name.to_owned());
                next.push(running);
            }
            _ => {
                next.push(crate::build::http_system(&config, name)?);
                done.rebuilt.push(name.to_owned());
            }
        }
    }
    done.removed = removed;
    let (old, new) = (current.model(), config.model());
    for (section, changed) in [
        ("queue", old.queue != new.queue),
        ("serve", old.serve != new.serve),
        ("gateway", old.gateway != new.gateway),
    ] {
        if changed {
            done.needs_restart.push(section);
        }
    }
    systems.replace(next);
    Ok((config, done))
}

/// Reloads on every SIGHUP until `shutdown` is cancelled, logging what happened.
pub(crate) async fn on_sighup(
    mut current: Config,
    systems: Systems,
    queue: Queue,
    shutdown: CancellationToken,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let path = PathBuf::from(current.source().name());
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(hangups) => hangups,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; configuration changes need a restart");
                return;
            }
        };
        while shutdown.run_until_cancelled(hangups.recv()).await.flatten().is_some() {
            // Rotated certificates and keys are taken whether or not the file changed.
            for system in systems.all() {
                system.refresh_tls();
            }
            match reload(&path, &current, &systems, &queue).await {
                Ok((config, done)) => {
                    current = config;
                    tracing::info!(
                        kept = ?done.kept,
                        rebuilt = ?done.rebuilt,
                        removed = ?done.removed,
                        "configuration reloaded from {}",
                        path.display()
                    );
                    if !done.needs_restart.is_empty() {
                        tracing::warn!(sections = ?done.needs_restart, "these sections changed and apply only after a restart");
                    }
                }
                Err(e) => tracing::error!("reload of {} refused: {e}", path.display()),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (current, systems, queue);
        shutdown.cancelled().await;
    }
}
