//! Runtime objects from a configuration: each system's [`Policy`] and the
//! durable queue's settings, built from the very values the checker checked.
//! A system with any lint error is refused, so a service cannot start with a
//! policy `ballast lint` would reject.

use std::collections::BTreeMap;
use std::time::Duration;

use ballast::{Backoff, Breaker, Budget, Bulkhead, Policy, PolicyBuilder, Retry, Rule, Severity, Timeout};

use crate::config::Config;
use crate::finding::{system_path, Finding, Problem};
use crate::model::{BreakerSection, RetrySection, System, TimeoutSection};
use crate::suggest::did_you_mean;

/// The backoff kinds that exist (R-RES-RE-X3).
pub const BACKOFF_KINDS: [&str; 2] = ["exponential", "exponential-full-jitter"];
/// The breaker kinds that exist.
pub const BREAKER_KINDS: [&str; 3] = ["consecutive", "count", "sampling"];
/// The timeout strategies that exist.
pub const STRATEGIES: [&str; 2] = ["aggressive", "cooperative"];

/// Why a runtime object was not built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No system of that name is declared.
    #[error("no system `{name}` in {file}{}", suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownSystem {
        /// The name asked for.
        name: String,
        /// The file.
        file: String,
        /// The closest declared name.
        suggestion: Option<String>,
    },
    /// The section has lint errors; the first one is in the message.
    #[error("[{section}] in {file} breaks the rules ({}); run `ballast lint {file}` for all of them", findings.first().map(ToString::to_string).unwrap_or_default())]
    Refused {
        /// `systems.NAME` or `queue`.
        section: String,
        /// The file.
        file: String,
        /// Every error found in the section.
        findings: Vec<Finding>,
    },
    /// An HTTP system needs a `base_url`.
    #[error(
        "[systems.{system}] in {file} has no base_url; add e.g. `base_url = \"https://gateway.example\"`"
    )]
    NoBaseUrl {
        /// The system.
        system: String,
        /// The file.
        file: String,
    },
    /// The HTTP client of a system could not be built.
    #[error("[systems.{system}] in {file}: {source}")]
    Http {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// What the HTTP crate refused.
        source: ballast_http::HttpError,
    },
    /// A `retry_on` name is not an outcome class the HTTP client knows.
    #[error("[systems.{system}] in {file}: {source}")]
    RetryOn {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// The name refused.
        source: ballast_http::UnknownClass,
    },
    /// The file has no `[queue]` section.
    #[error("{file} has no [queue] section; add one with at least `url`")]
    NoQueue {
        /// The file.
        file: String,
    },
}

/// The durable queue's settings from `[queue]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// `sqlite://…` or `postgres://…`.
    pub url: String,
    /// How often workers poll for due tasks.
    pub poll_interval: Duration,
    /// Durable attempts before failed + alert; use it for every task enqueued.
    pub max_attempts: u32,
    /// The backoff between durable attempts.
    pub backoff: ballast_queue::DurableBackoff,
}

/// How `ballast serve` listens, from `[serve]` (defaults without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeSettings {
    /// The admin listener's address.
    pub listen: std::net::SocketAddr,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How often the queue's counts are refreshed.
    pub stats_interval: Duration,
}

impl Default for ServeSettings {
    /// Loopback port 9464, 256 connections, 5 s for headers, counts every 5 s.
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 9464)),
            max_connections: 256,
            header_read_timeout: Duration::from_secs(5),
            stats_interval: Duration::from_secs(5),
        }
    }
}

impl QueueSettings {
    /// Connects to the queue's database.
    pub async fn connect(&self) -> ballast_queue::Result<ballast_queue::Queue> {
        ballast_queue::Queue::connect(&self.url).await
    }

    /// A worker builder with this poll interval and backoff; add handlers and build.
    pub fn worker(&self, queue: ballast_queue::Queue) -> ballast_queue::WorkerBuilder {
        ballast_queue::Worker::builder(queue).poll_interval(self.poll_interval).backoff(self.backoff)
    }
}

impl Config {
    /// The policy builder of system `name`, for adding listeners or a seed
    /// before [`build`](PolicyBuilder::build). Refused when the system has
    /// lint errors.
    pub fn policy_builder(&self, name: &str) -> Result<PolicyBuilder, ConfigError> {
        let system = self.system(name).ok_or_else(|| ConfigError::UnknownSystem {
            name: name.to_owned(),
            file: self.source.name().to_owned(),
            suggestion: did_you_mean(name, self.system_names()).map(str::to_owned),
        })?;
        let errors: Vec<Finding> = self.lint_system(name).into_iter().filter(Finding::is_error).collect();
        if !errors.is_empty() {
            return Err(ConfigError::Refused {
                section: format!("systems.{name}"),
                file: self.source.name().to_owned(),
                findings: errors,
            });
        }
        Ok(translate(name, system).builder)
    }

    /// The policy of system `name`.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [systems.sber.retry]
    ///     max_attempts = 3
    ///     [systems.sber.timeout]
    ///     attempt = "1s"
    /// "#).unwrap();
    /// let policy = config.policy("sber").unwrap();
    /// assert_eq!(policy.retry().max_attempts(), 3);
    /// ```
    pub fn policy(&self, name: &str) -> Result<Policy, ConfigError> {
        self.finish_policy(name, self.policy_builder(name)?)
    }

    /// Builds a builder from [`policy_builder`](Self::policy_builder), its
    /// refusals located in the file.
    pub(crate) fn finish_policy(&self, name: &str, builder: PolicyBuilder) -> Result<Policy, ConfigError> {
        // Lint ran the core's own checks on this builder, so build() cannot refuse it.
        builder.build().map_err(|e| ConfigError::Refused {
            section: format!("systems.{name}"),
            file: self.source.name().to_owned(),
            findings: e
                .violations
                .into_iter()
                .map(|v| crate::rules::violation(name, v).locate(&self.source, &self.index))
                .collect(),
        })
    }

    /// Every system's policy, by name.
    pub fn policies(&self) -> Result<BTreeMap<String, Policy>, ConfigError> {
        self.system_names().map(|name| Ok((name.to_owned(), self.policy(name)?))).collect()
    }

    /// How `ballast serve` listens: `[serve]` over [`ServeSettings::default`].
    /// Refused when `[serve]` has lint errors.
    pub fn serve(&self) -> Result<ServeSettings, ConfigError> {
        let defaults = ServeSettings::default();
        let Some(serve) = &self.file.serve else { return Ok(defaults) };
        let errors: Vec<Finding> =
            crate::rules::serve(serve).into_iter().map(|p| p.locate(&self.source, &self.index)).collect();
        if !errors.is_empty() {
            let file = self.source.name().to_owned();
            return Err(ConfigError::Refused { section: "serve".into(), file, findings: errors });
        }
        Ok(ServeSettings {
            listen: serve.listen.as_deref().and_then(|l| l.parse().ok()).unwrap_or(defaults.listen),
            max_connections: serve
                .max_connections
                .map_or(defaults.max_connections, |n| usize::try_from(n).unwrap_or(usize::MAX)),
            header_read_timeout: serve.header_read_timeout.map_or(defaults.header_read_timeout, |d| d.get()),
            stats_interval: serve.stats_interval.map_or(defaults.stats_interval, |d| d.get()),
        })
    }

    /// The durable queue's settings. Refused when `[queue]` has lint errors.
    pub fn queue(&self) -> Result<QueueSettings, ConfigError> {
        let file = self.source.name().to_owned();
        let queue = self.file.queue.as_ref().ok_or_else(|| ConfigError::NoQueue { file: file.clone() })?;
        let errors: Vec<Finding> = crate::rules::queue(queue)
            .into_iter()
            .filter(|p| p.severity == Severity::Error)
            .map(|p| p.locate(&self.source, &self.index))
            .collect();
        if !errors.is_empty() {
            return Err(ConfigError::Refused { section: "queue".into(), file, findings: errors });
        }
        let schedule = crate::durable::DurableSchedule::from_section(queue);
        Ok(QueueSettings {
            url: queue.url.clone().unwrap_or_default(),
            poll_interval: schedule.poll_interval,
            max_attempts: schedule.max_attempts,
            backoff: schedule.backoff,
        })
    }
}

/// The core objects a system's sections describe, and the problems met on
/// the way (unknown kinds, missing keys). Where a value is unusable a
/// stand-in is used so the remaining checks still run; such a builder is
/// never handed out, because the problem is an error.
pub(crate) fn translate(name: &str, system: &System) -> Translated {
    let mut problems = Vec::new();
    // Without a [retry] section a call makes one attempt: retry is opt-in.
    let retry = system.retry.as_ref().map_or(Retry::never(), |r| retry(name, r, &mut problems));
    let timeout = system.timeout.as_ref().map_or(Timeout::default(), |t| timeout(name, t, &mut problems));
    let mut builder = Policy::builder(name).retry(retry).timeout(timeout);
    if let Some(b) = system.breaker.as_ref().and_then(|b| breaker(name, b, &mut problems)) {
        builder = builder.breaker(b);
    }
    if let Some(b) = &system.bulkhead {
        match b.limit {
            Some(limit) => {
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let queue = b.queue.map_or(0, |q| usize::try_from(q).unwrap_or(usize::MAX));
                builder = builder.bulkhead(Bulkhead::new(limit).queue(queue));
            }
            None => {
                problems.push(missing(name, "bulkhead", "limit", "add `limit = 8` (concurrent attempts)"))
            }
        }
    }
    Translated { builder, retry, timeout, problems }
}

/// What [`translate`] makes of a system.
#[derive(Debug)]
pub(crate) struct Translated {
    pub builder: PolicyBuilder,
    pub retry: Retry,
    pub timeout: Timeout,
    pub problems: Vec<Problem>,
}

fn retry(name: &str, r: &RetrySection, problems: &mut Vec<Problem>) -> Retry {
    let attempts = r.max_attempts.map_or(3, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let first = r.first_delay.map_or(Duration::from_millis(500), |d| d.get());
    let mut backoff = match r.backoff.as_deref() {
        None | Some("exponential") => Backoff::exponential(first),
        Some("exponential-full-jitter") => Backoff::exponential_full_jitter(first),
        Some(other) => {
            let help = match did_you_mean(other, BACKOFF_KINDS) {
                Some(k) => format!("did you mean \"{k}\"?"),
                None => "use \"exponential\" (decorrelated jitter) or \"exponential-full-jitter\"".to_owned(),
            };
            problems.push(Problem::error(
                Some(Rule::ReX3),
                system_path(name, &["retry", "backoff"]),
                format!("backoff \"{other}\" does not exist: only jittered exponential backoff is allowed (R-RES-RE-X3)"),
                help,
            ));
            Backoff::exponential(first)
        }
    };
    if let Some(max) = r.max_delay {
        backoff = backoff.max_delay(max.get());
    }
    let retry = Retry::attempts(attempts).backoff(backoff);
    // 0 means "the default budget", so a file can spell the key out without choosing a ratio.
    match r.budget_ratio {
        Some(ratio) if ratio != 0.0 => retry.budget(Budget::ratio(ratio)),
        _ => retry,
    }
}

fn timeout(name: &str, t: &TimeoutSection, problems: &mut Vec<Problem>) -> Timeout {
    let attempt = t.attempt.map_or(Duration::from_secs(5), |d| d.get());
    let timeout = match t.strategy.as_deref() {
        None | Some("aggressive") => Timeout::aggressive(attempt),
        Some("cooperative") => Timeout::cooperative(attempt),
        Some(other) => {
            problems.push(Problem::error(
                None,
                system_path(name, &["timeout", "strategy"]),
                format!("timeout strategy \"{other}\" does not exist"),
                one_of(other, &STRATEGIES),
            ));
            Timeout::aggressive(attempt)
        }
    };
    match t.total {
        Some(total) => timeout.total(total.get()),
        None => timeout,
    }
}

fn breaker(name: &str, b: &BreakerSection, problems: &mut Vec<Problem>) -> Option<Breaker> {
    let Some(kind) = b.kind.as_deref() else {
        problems.push(missing(
            name,
            "breaker",
            "kind",
            "add `kind = \"count\"` (or \"consecutive\", \"sampling\")",
        ));
        return None;
    };
    // Keys that belong to another kind are refused rather than silently ignored.
    let foreign: &[(&str, bool)] = match kind {
        "consecutive" => &[
            ("size", b.size.is_some()),
            ("min_calls", b.min_calls.is_some()),
            ("duration", b.duration.is_some()),
            ("min_throughput", b.min_throughput.is_some()),
        ],
        "count" => &[("duration", b.duration.is_some()), ("min_throughput", b.min_throughput.is_some())],
        "sampling" => &[("size", b.size.is_some()), ("min_calls", b.min_calls.is_some())],
        other => {
            problems.push(Problem::error(
                None,
                system_path(name, &["breaker", "kind"]),
                format!("breaker kind \"{other}\" does not exist"),
                one_of(other, &BREAKER_KINDS),
            ));
            return None;
        }
    };
    for (key, _) in foreign.iter().filter(|(_, present)| *present) {
        problems.push(Problem::error(
            None,
            system_path(name, &["breaker", key]),
            format!("`{key}` does not apply to a \"{kind}\" breaker"),
            format!("remove `{key}`, or change `kind` to the breaker it belongs to"),
        ));
    }
    let Some(threshold) = b.threshold else {
        problems.push(missing(
            name,
            "breaker",
            "threshold",
            "add e.g. `threshold = 0.5` (5 for \"consecutive\")",
        ));
        return None;
    };
    let breaker = match kind {
        "consecutive" => {
            if threshold.fract() != 0.0 || !(0.0..=f64::from(u32::MAX)).contains(&threshold) {
                problems.push(Problem::error(
                    None,
                    system_path(name, &["breaker", "threshold"]),
                    format!("a \"consecutive\" breaker's threshold counts failures in a row; {threshold} is not a whole number"),
                    "use e.g. `threshold = 5`, or `kind = \"count\"` for a share of failures",
                ));
                return None;
            }
            Breaker::consecutive(threshold as u32)
        }
        "count" => {
            let Some(size) = b.size else {
                problems.push(missing(
                    name,
                    "breaker",
                    "size",
                    "add e.g. `size = 50` (recent calls counted)",
                ));
                return None;
            };
            // An oversized window is refused by the rules; keep the stand-in small.
            let size = usize::try_from(size.min(crate::rules::MAX_COUNT_WINDOW)).unwrap_or(0);
            let breaker = Breaker::count(threshold, size);
            match b.min_calls {
                Some(m) => breaker.min_calls(usize::try_from(m).unwrap_or(usize::MAX)),
                None => breaker,
            }
        }
        _ => {
            let Some(period) = b.duration else {
                problems.push(missing(
                    name,
                    "breaker",
                    "duration",
                    "add e.g. `duration = \"30s\"` (the period sampled)",
                ));
                return None;
            };
            let breaker = Breaker::sampling(threshold, period.get());
            match b.min_throughput {
                Some(n) => breaker.min_throughput(n),
                None => breaker,
            }
        }
    };
    Some(match b.half_open_after {
        Some(d) => breaker.half_open_after(d.get()),
        None => breaker,
    })
}

fn missing(name: &str, section: &str, key: &str, help: &str) -> Problem {
    Problem::error(
        None,
        system_path(name, &[section, key]),
        format!("`{key}` is missing from [systems.{name}.{section}]"),
        help,
    )
}

fn one_of(value: &str, allowed: &[&str]) -> String {
    let list = allowed.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    match did_you_mean(value, allowed.iter().copied()) {
        Some(s) => format!("did you mean \"{s}\"? Use one of {list}"),
        None => format!("use one of {list}"),
    }
}
