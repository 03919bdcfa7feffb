//! `[queue]`: the durable task queue that takes over what in-memory retry
//! cannot finish (R-RES-RE-4, R-RES-RE-5) — its keys, its rules, the
//! schedule it configures (the one [`DurableSchedule`] `ballast lint` and
//! `explain` reason about and the queue and worker are opened with), and
//! the settings `ballast serve` opens it with.

use std::time::Duration;

use ballast_vocab::http::is_header_name;
use ballast_vocab::queue::{DurableSchedule, MIN_LEASE};
use serde::Deserialize;

use crate::alerts::is_env_name;
use crate::duration::{display, ConfigDuration};
use crate::finding::KeyFinding;
use crate::schema::Schema::{self, Named, Value};

/// `[queue]`: the durable task queue (R-RES-RE-5).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct QueueSection {
    /// `url`: `sqlite://file.db` or `postgres://…`.
    pub url: Option<String>,
    /// `poll_interval`: how often workers look for due tasks (default
    /// [`ballast_vocab::queue::DEFAULT_POLL_INTERVAL`], 5 s).
    pub poll_interval: Option<ConfigDuration>,
    /// `lease`: how long a claimed task stays with its worker without a
    /// heartbeat; after a crash, its tasks run again this long after the
    /// last heartbeat (default [`ballast_vocab::queue::DEFAULT_LEASE`], 30 s).
    pub lease: Option<ConfigDuration>,
    /// `max_attempts`: durable attempts before the task fails and a human is
    /// alerted (default [`ballast_vocab::queue::DEFAULT_MAX_ATTEMPTS`], 10).
    pub max_attempts: Option<u64>,
    /// `max_age`: how long after its first attempt a deferred write whose
    /// system declares no `key_ttl` may still be sent; attempts refused
    /// unsent (breaker open, bulkhead full) are postponed without counting
    /// against `max_attempts` until then (default
    /// [`ballast_vocab::queue::DEFAULT_MAX_AGE`], 24 h).
    pub max_age: Option<ConfigDuration>,
    /// `seal_key_env`: the environment variable holding the key (32 bytes,
    /// as 64 hex digits or base64) that seals credential headers of
    /// deferred writes before they are stored (ChaCha20-Poly1305). Without
    /// it, deferring a request that carries one is refused unsent.
    pub seal_key_env: Option<String>,
    /// `seal_headers`: header names sealed besides `Authorization`,
    /// `Proxy-Authorization`, `Cookie` and `X-Api-Key`.
    pub seal_headers: Option<Vec<String>>,
    /// `keep_answer`: how much of the body of the upstream's answer to a
    /// deferred write its task keeps, for `GET /tasks/{handle}` (default
    /// `"64KiB"`; `0` keeps the status and headers only).
    pub keep_answer: Option<crate::size::ConfigSize>,
    /// `seal_answers`: seal every kept answer with the seal key, not only
    /// those of requests that were sealed (default false).
    pub seal_answers: Option<bool>,
    /// `retain_completed`: how long `ballast serve` keeps completed and
    /// cancelled tasks before pruning them (default 7 days).
    pub retain_completed: Option<ConfigDuration>,
    /// `retain_failed`: how long it keeps failed tasks (default 30 days).
    pub retain_failed: Option<ConfigDuration>,
    /// `[queue.periodic.NAME]`: calls to a system once per period.
    pub periodic: Option<crate::periodic::Sections>,
}

/// The largest answer body a task may keep.
const MAX_KEPT_ANSWER: u64 = 16 << 20;

pub(crate) const KEYS: &[(&str, Schema)] = &[
    ("url", Value),
    ("poll_interval", Value),
    ("lease", Value),
    ("max_attempts", Value),
    ("max_age", Value),
    ("seal_key_env", Value),
    ("seal_headers", Value),
    ("keep_answer", Value),
    ("seal_answers", Value),
    ("retain_completed", Value),
    ("retain_failed", Value),
    ("periodic", Named(crate::periodic::KEYS)),
];

impl QueueSection {
    /// The schedule this section configures: the queue's defaults
    /// ([`DurableSchedule::default`]) for what it leaves out.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ballast_config::model::QueueSection;
    ///
    /// let schedule = QueueSection { max_attempts: Some(3), ..QueueSection::default() }.schedule();
    /// assert_eq!(schedule.max_attempts, 3);
    /// // 2 + 4 s of waits, plus one 5 s poll interval per wait:
    /// assert_eq!(schedule.waits_total(), Duration::from_secs(6 + 2 * 5));
    /// ```
    pub fn schedule(&self) -> DurableSchedule {
        let defaults = DurableSchedule::default();
        DurableSchedule {
            max_attempts: self
                .max_attempts
                .map_or(defaults.max_attempts, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            poll_interval: self.poll_interval.map_or(defaults.poll_interval, |d| d.get()),
            backoff: defaults.backoff,
            max_age: self.max_age.map_or(defaults.max_age, |d| d.get()),
        }
    }
}

impl QueueSection {
    /// How long a finished task is kept at least: the shorter of
    /// `retain_completed` and `retain_failed`.
    pub(crate) fn retained(&self) -> Duration {
        let completed = self.retain_completed.map_or(ballast_vocab::queue::RETAIN_COMPLETED, |d| d.get());
        let failed = self.retain_failed.map_or(ballast_vocab::queue::RETAIN_FAILED, |d| d.get());
        completed.min(failed)
    }
}

/// The `[queue]` section's ranges.
pub(crate) fn rules(q: &QueueSection) -> Vec<KeyFinding> {
    let mut out = Vec::new();
    let mut refuse = |key: &str, message: String, help: String| {
        let mut path = vec!["queue".to_owned()];
        path.extend(key.split('.').map(str::to_owned));
        out.push(KeyFinding::error(None, path, message, help));
    };
    match q.url.as_deref() {
        None => refuse(
            "url",
            "`url` is missing from [queue]".into(),
            "add e.g. `url = \"sqlite://ballast.db\"` or `url = \"postgres://…\"`".into(),
        ),
        Some(url) if ballast_vocab::queue::Backend::from_url(url).is_none() => refuse(
            "url",
            format!("queue url \"{}\" is neither sqlite: nor postgres://", ballast::redact_url(url)),
            "use e.g. \"sqlite://ballast.db\" or \"postgres://user@host/db\"".into(),
        ),
        Some(_) => {}
    }
    if q.poll_interval.is_some_and(|d| d.get().is_zero()) {
        refuse(
            "poll_interval",
            "`poll_interval` is zero: workers would poll the database in a busy loop".into(),
            "use e.g. \"5s\"".into(),
        );
    }
    if q.lease.is_some_and(|d| d.get() < MIN_LEASE) {
        refuse(
            "lease",
            format!(
                "`lease` is below {}: a worker renews it every third of that, and one slow heartbeat would hand its tasks to another worker while they run",
                display(MIN_LEASE)
            ),
            "use e.g. \"30s\", the queue's default; it is how long a crashed worker's tasks wait".into(),
        );
    }
    let guide = format!("use {}, the guide's value (R-RES-RE-5)", ballast_vocab::queue::DEFAULT_MAX_ATTEMPTS);
    match q.max_attempts {
        Some(0) => refuse(
            "max_attempts",
            "`max_attempts` is 0: it counts the first attempt, so no task would ever run".into(),
            guide,
        ),
        Some(n) if n > i32::MAX as u64 => {
            refuse("max_attempts", format!("`max_attempts` {n} is larger than the queue can store"), guide)
        }
        _ => {}
    }
    if let Some(name) = q.seal_key_env.as_deref() {
        if !is_env_name(name) {
            refuse(
                "seal_key_env",
                format!("seal_key_env \"{name}\" is not an environment variable name"),
                "name the variable that holds the 32-byte key (64 hex digits), e.g. \"BALLAST_SEAL_KEY\"; never the key itself".into(),
            );
        }
    }
    let unsealable: Vec<(usize, &String)> =
        q.seal_headers.iter().flatten().enumerate().filter(|(_, h)| !is_header_name(h)).collect();
    for (i, header) in unsealable {
        refuse(
            &format!("seal_headers.{i}"),
            format!("seal_headers entry \"{header}\" is not an HTTP header name"),
            "use e.g. \"X-Card-Token\"".into(),
        );
    }
    if q.keep_answer.is_some_and(|b| b.bytes() > MAX_KEPT_ANSWER) {
        refuse(
            "keep_answer",
            "`keep_answer` is over 16MiB: each delivered task keeps its answer in its row".into(),
            "keep what a caller reads of the answer, e.g. \"64KiB\" (the default)".into(),
        );
    }
    if q.seal_answers == Some(true) && q.seal_key_env.is_none() {
        refuse(
            "seal_answers",
            "`seal_answers = true` without `seal_key_env`: there is no key to seal them with".into(),
            "set `seal_key_env` to the variable that holds the seal key".into(),
        );
    }
    if q.max_age.is_some_and(|d| d.get().is_zero()) {
        refuse(
            "max_age",
            "`max_age` is zero: every deferred write to a system without `key_ttl` would fail before its first delivery".into(),
            "use a day or more, e.g. \"24h\" (the default)".into(),
        );
    }
    for key in ["retain_completed", "retain_failed"] {
        let value = if key == "retain_completed" { q.retain_completed } else { q.retain_failed };
        if value.is_some_and(|d| d.get().is_zero()) {
            refuse(
                key,
                format!(
                    "`{key}` is zero: tasks would be pruned as soon as they end, and their keys with them"
                ),
                "keep finished tasks for days, e.g. \"7d\"; a pruned task's key no longer deduplicates"
                    .into(),
            );
        }
    }
    out
}

/// The durable queue's settings from `[queue]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// `sqlite://…` or `postgres://…`.
    pub url: String,
    /// How long a claim holds a task without a heartbeat.
    pub lease: Duration,
    /// Attempts, backoff, poll interval and the age bound: the schedule lint
    /// and explain reason about, which the queue is opened with and so every
    /// task and worker made from it.
    pub schedule: ballast_vocab::queue::DurableSchedule,
    /// How long completed and cancelled tasks are kept before pruning.
    pub retain_completed: Duration,
    /// How long failed tasks are kept before pruning.
    pub retain_failed: Duration,
    /// The periodic calls (`[queue.periodic.NAME]`).
    pub periodic: Vec<crate::periodic::PeriodicSettings>,
}
