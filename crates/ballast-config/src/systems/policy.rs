//! Each system's [`PolicyBuilder`], made from the very values the checker
//! checked: a system with any lint error is refused, so a service cannot
//! start with a policy `ballast lint` would reject. A builder is data; the
//! composition root (`ballast_server::build::policy`) builds the running
//! policy from it.

use ballast::PolicyBuilder;

use crate::config::Config;
use crate::error::ConfigError;
use crate::finding::Finding;
use crate::suggest::did_you_mean;
use crate::systems::translate::translate;

impl Config {
    /// The policy builder of system `name`, for adding listeners or a seed
    /// before [`build`](PolicyBuilder::build). Refused when the system has
    /// lint errors; lint ran the core's own checks on it, so its `build`
    /// does not refuse.
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
    /// let policy = config.policy_builder("sber").unwrap().build().unwrap();
    /// assert_eq!(policy.retry().max_attempts(), 3);
    /// ```
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
}
