//! Each system's [`Policy`], built from the very values the checker
//! checked: a system with any lint error is refused, so a service cannot
//! start with a policy `ballast lint` would reject.

use std::collections::BTreeMap;

use ballast::{Policy, PolicyBuilder};

use crate::config::Config;
use crate::error::ConfigError;
use crate::finding::Finding;
use crate::suggest::did_you_mean;
use crate::systems::translate::translate;

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
                .map(|v| crate::systems::rules::violation(name, v).locate(&self.source, &self.index))
                .collect(),
        })
    }

    /// Every system's policy, by name.
    pub fn policies(&self) -> Result<BTreeMap<String, Policy>, ConfigError> {
        self.system_names().map(|name| Ok((name.to_owned(), self.policy(name)?))).collect()
    }
}
