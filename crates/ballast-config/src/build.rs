//! What a configuration builds: each system's [`Policy`] and the durable
//! queue's settings, from the very values the checker checked. A system with
//! any lint error is refused, so a service cannot start with a policy
//! `ballast lint` would reject. The parts that run — HTTP systems, the
//! queue, its worker — are built from these by `ballast-server`.

use std::collections::BTreeMap;
use std::time::Duration;

use ballast::{Policy, PolicyBuilder, Severity};

use crate::config::Config;
use crate::finding::Finding;
use crate::suggest::did_you_mean;
use crate::translate::translate;

/// Why a system's policy or settings, or the queue's, were refused.
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
    /// A `retry_on` name is not an outcome class the HTTP client knows.
    #[error("[systems.{system}] in {file}: {source}")]
    RetryOn {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// The name refused.
        source: ballast_vocab::http::UnknownClass,
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
        Ok(QueueSettings {
            url: queue.url.clone().unwrap_or_default(),
            lease: queue.lease.map_or(ballast_vocab::queue::DEFAULT_LEASE, |d| d.get()),
            schedule: queue.schedule(),
            retain_completed: queue
                .retain_completed
                .map_or(ballast_vocab::queue::RETAIN_COMPLETED, |d| d.get()),
            retain_failed: queue.retain_failed.map_or(ballast_vocab::queue::RETAIN_FAILED, |d| d.get()),
        })
    }
}
