//! `[queue.periodic.NAME]`: a call to a system once per period — "confirm
//! every pending payment each minute" — as a durable delivery whose
//! idempotency key names its period, so it runs once per period across
//! every replica of `ballast serve` on one database, survives restarts, and
//! is retried like any deferred write. Its keys, its rules (the period
//! against the task's worst-case retry window among them), and the settings
//! `ballast serve` registers with its worker.

use std::collections::BTreeMap;
use std::time::Duration;

use ballast_vocab::queue::{check_periodic_name, CatchUp, DurableSchedule, Schedule};
use serde::Deserialize;

use crate::duration::{display, ConfigDuration};
use crate::finding::KeyFinding;
use crate::schema::Schema::{self, Value};

/// `[queue.periodic.NAME]`: one periodic call.
///
/// ```toml
/// [queue.periodic.reconcile]
/// system = "sber"
/// method = "POST"
/// path = "payments/reconcile"
/// every = "1m"            # or cron = "0 6 * * *" (UTC)
/// max_attempts = 3        # its retries end before the next period
/// catch_up = "latest"     # after a stop: the latest missed period ("all", "none")
/// jitter = "5s"
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct PeriodicSection {
    /// `system`: the system called.
    pub system: Option<String>,
    /// `method`: `GET` (default), `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: Option<String>,
    /// `path`: under the system's `base_url`, as a call's path.
    pub path: Option<String>,
    /// `body`: the request body, if any (stored with each period's task).
    pub body: Option<String>,
    /// `every`: a period every this long (at least 1 s), on the grid of its
    /// multiples since the Unix epoch.
    pub every: Option<ConfigDuration>,
    /// `cron`: periods at a cron expression's times, in UTC.
    pub cron: Option<String>,
    /// `catch_up`: `latest` (default), `all` or `none`.
    pub catch_up: Option<String>,
    /// `jitter`: each period's call up to this long after the period starts.
    pub jitter: Option<ConfigDuration>,
    /// `max_attempts`: attempts of each period's task (default `[queue]`'s).
    pub max_attempts: Option<u64>,
}

pub(crate) const KEYS: &[(&str, Schema)] = &[
    ("system", Value),
    ("method", Value),
    ("path", Value),
    ("body", Value),
    ("every", Value),
    ("cron", Value),
    ("catch_up", Value),
    ("jitter", Value),
    ("max_attempts", Value),
];

/// The methods a periodic call may use.
const METHODS: [&str; 6] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// One periodic call, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodicSettings {
    /// Its name, in every period's key (`periodic:NAME:START`).
    pub name: String,
    /// The system called.
    pub system: String,
    /// The method.
    pub method: http::Method,
    /// The path under the system's `base_url`.
    pub path: String,
    /// The body.
    pub body: Option<String>,
    /// When its periods start.
    pub schedule: Schedule,
    /// What a start after missed periods enqueues.
    pub catch_up: CatchUp,
    /// Each period's share of this, after the period's start.
    pub jitter: Duration,
    /// Attempts of each period's task, unless the queue's.
    pub max_attempts: Option<u32>,
}

/// The findings of every `[queue.periodic.NAME]`, and the settings of those
/// without errors.
pub(crate) fn check(
    periodic: Option<&Sections>,
    systems: &[&str],
    queue: &DurableSchedule,
    retained: Duration,
) -> (Vec<KeyFinding>, Vec<PeriodicSettings>) {
    let (mut findings, mut settings) = (Vec::new(), Vec::new());
    for (name, section) in periodic.into_iter().flatten() {
        let before = findings.len();
        if let Err(why) = check_periodic_name(name) {
            let path = ["queue", "periodic", name.as_str()].map(str::to_owned).to_vec();
            findings.push(KeyFinding::error(None, path, why, "e.g. [queue.periodic.nightly-report]"));
        }
        let mut refuse = |key: &str, message: String, help: &str| {
            let path = ["queue", "periodic", name.as_str(), key].map(str::to_owned).to_vec();
            findings.push(KeyFinding::error(None, path, message, help));
        };
        let schedule = match (section.every, section.cron.as_deref()) {
            (Some(every), None) => Schedule::every(every.get()).map_err(|e| ("every", e.to_string())),
            (None, Some(cron)) => Schedule::cron(cron).map_err(|e| ("cron", e.to_string())),
            (Some(_), Some(_)) => {
                Err(("cron", "both `every` and `cron`: a periodic call has one schedule".into()))
            }
            (None, None) => Err(("every", format!("[queue.periodic.{name}] has neither `every` nor `cron`"))),
        };
        let schedule = schedule
            .map_err(|(key, message)| {
                refuse(key, message, "e.g. every = \"1m\", or cron = \"0 6 * * *\" (06:00 UTC every day)")
            })
            .ok();
        let system = section.system.clone().unwrap_or_default();
        if !systems.contains(&system.as_str()) {
            let names = systems.join(", ");
            refuse(
                "system",
                format!("[queue.periodic.{name}] calls system {system:?}, which is not configured"),
                &format!("name one of the [systems.*]: {names}"),
            );
        }
        let path = section.path.clone().unwrap_or_default();
        if path.is_empty() {
            refuse(
                "path",
                format!("[queue.periodic.{name}] has no `path`"),
                "e.g. path = \"payments/reconcile\"",
            );
        }
        let method = section.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
        if !METHODS.contains(&method.as_str()) {
            refuse(
                "method",
                format!("method {method:?} is not one a periodic call sends"),
                "use GET, HEAD, POST, PUT, PATCH or DELETE",
            );
        }
        let catch_up = match section.catch_up.as_deref().map(|text| (text, CatchUp::parse(text))) {
            None => CatchUp::default(),
            Some((_, Some(catch_up))) => catch_up,
            Some((other, None)) => {
                refuse(
                    "catch_up",
                    format!("catch_up {other:?} is none of latest, all, none"),
                    "use \"latest\" (one run after a stop), \"all\" or \"none\"",
                );
                CatchUp::default()
            }
        };
        let max_attempts = match section.max_attempts {
            Some(0) => {
                refuse(
                    "max_attempts",
                    "`max_attempts` is 0: no period would ever run".into(),
                    "use 1 or more",
                );
                None
            }
            Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            None => None,
        };
        let jitter = section.jitter.map_or(Duration::ZERO, |d| d.get());
        if let Some(schedule) = &schedule {
            let attempts = max_attempts.unwrap_or(queue.max_attempts);
            let window =
                DurableSchedule { max_attempts: attempts, ..*queue }.waits_total().saturating_add(jitter);
            let period = schedule.shortest_period();
            if window >= period {
                refuse(
                    "max_attempts",
                    format!(
                        "a period's call may still be retrying {} after its period started (its jitter, its attempts \
                         and [queue]'s backoff), past the next period {} later: two periods would run at once",
                        display(window),
                        display(period)
                    ),
                    "give it fewer attempts (max_attempts = 3), less jitter or a longer period",
                );
            }
            let longest = schedule.longest_period().saturating_add(jitter);
            if retained <= longest {
                refuse(
                    "every",
                    format!(
                        "[queue] keeps finished tasks {} (the shorter of retain_completed and retain_failed), not \
                         longer than a period of this call ({}): a restart after its task was pruned would run \
                         its period again",
                        display(retained),
                        display(longest)
                    ),
                    "keep finished tasks longer than the longest period (retain_completed, retain_failed), or \
                     use a shorter period",
                );
            }
        }
        if let (true, Some(schedule)) = (findings.len() == before, schedule) {
            settings.push(PeriodicSettings {
                name: name.clone(),
                system,
                method: method.parse().unwrap_or(http::Method::GET),
                path,
                body: section.body.clone(),
                schedule,
                catch_up,
                jitter,
                max_attempts,
            });
        }
    }
    (findings, settings)
}

/// The periodic calls by name, for [`crate::queue::QueueSection`].
pub(crate) type Sections = BTreeMap<String, PeriodicSection>;
