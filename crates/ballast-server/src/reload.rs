//! Reloading the configuration without a restart: on SIGHUP the file is
//! read and checked again; a file with lint errors is refused (its findings
//! logged, the running systems keep serving), a good one replaces the
//! systems. A system whose section did not change keeps its running policy —
//! breaker state, bulkhead, budget — and its connection pool; calls in flight
//! finish with the system they started on.
//!
//! Only `[systems.*]` is reloaded; listeners and the queue need a restart.

use std::path::PathBuf;

use ballast_config::{report, Config};
use ballast_http::Systems;
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
    System(#[from] ballast_config::ConfigError),
}

/// Reads `path` again and, if it lints clean, replaces the systems in
/// `systems`, keeping those whose section equals the one in `current`.
/// Returns the new configuration and what changed.
pub fn reload(
    path: &std::path::Path,
    current: &Config,
    systems: &Systems,
) -> Result<(Config, Reloaded), ReloadError> {
    let config =
        Config::load(path).map_err(|e| ReloadError::Unreadable(report::human(&e.findings(), e.input())))?;
    let findings = config.lint();
    if ballast_config::has_errors(&findings) {
        return Err(ReloadError::Refused(report::human(&findings, Some(config.source()))));
    }
    let mut done = Reloaded::default();
    let mut next = Vec::new();
    for name in config.system_names() {
        match systems.get(name) {
            Some(running) if current.system(name) == config.system(name) => {
                done.kept.push(name.to_owned());
                next.push(running);
            }
            _ => {
                next.push(config.http_system(name)?);
                done.rebuilt.push(name.to_owned());
            }
        }
    }
    done.removed = current.system_names().filter(|n| config.system(n).is_none()).map(str::to_owned).collect();
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
pub(crate) async fn on_sighup(mut current: Config, systems: Systems, shutdown: CancellationToken) {
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
            match reload(&path, &current, &systems) {
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
        let _ = (current, systems);
        shutdown.cancelled().await;
    }
}
