//! HTTP systems from a configuration: each `[systems.NAME]` becomes a
//! [`ballast_http::HttpSystem`] with its own client and the policy the
//! checker checked, metrics attached.

use ballast_http::metrics::SystemMetrics;
use ballast_http::{HttpSystem, RetryOn, SystemBuildError};

use crate::build::ConfigError;
use crate::config::Config;

impl Config {
    /// The HTTP system `name`: its client (base URL, connect and read
    /// timeouts, `Idempotency-Key` header, `retry_on`), its policy with a
    /// [`SystemMetrics`] listener attached, and whether it is critical.
    /// Refused when the system has lint errors or no `base_url`.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [systems.sber]
    ///     base_url = "http://127.0.0.1:8080"
    ///     dedupes_by_key = true
    ///     key_ttl = "24h"
    ///     critical = true
    ///     [systems.sber.retry]
    ///     max_attempts = 3
    ///     [systems.sber.timeout]
    ///     attempt = "1s"
    /// "#).unwrap();
    /// let sber = config.http_system("sber").unwrap();
    /// assert!(sber.is_critical() && sber.dedupes_by_key());
    /// ```
    pub fn http_system(&self, name: &str) -> Result<HttpSystem, ConfigError> {
        let policy = self.policy_builder(name)?.listener(SystemMetrics::register(name));
        let file = || self.source.name().to_owned();
        let system = self.system(name).ok_or_else(|| ConfigError::UnknownSystem {
            name: name.to_owned(),
            file: file(),
            suggestion: None,
        })?;
        let base_url = system
            .base_url
            .as_deref()
            .ok_or_else(|| ConfigError::NoBaseUrl { system: name.to_owned(), file: file() })?;
        let http =
            |source: SystemBuildError| ConfigError::Http { system: name.to_owned(), file: file(), source };
        // The policy was built for this same name, with the checks lint runs.
        let mut builder = HttpSystem::builder(name, base_url)
            .policy(|_| policy)
            .dedupes_by_key(system.dedupes_by_key.unwrap_or(false))
            .critical(system.critical.unwrap_or(false));
        for (header, source) in system.headers.iter().flatten() {
            let var = source.env.clone().unwrap_or_default();
            let value = std::env::var(&var).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
                ConfigError::HeaderEnvUnset {
                    system: name.to_owned(),
                    header: header.clone(),
                    var: var.clone(),
                }
            })?;
            builder = builder.header(header, &value);
        }
        if let Some(queue) = &self.file.queue {
            if let Some(var) = &queue.seal_key_env {
                let text = std::env::var(var).unwrap_or_default();
                let key = ballast_http::SealKey::from_text(&text)
                    .map_err(|source| ConfigError::SealKey { var: var.clone(), source })?;
                builder = builder.seal_key(key);
            }
            if let Some(extra) = &queue.seal_headers {
                builder = builder.seal_headers(extra);
            }
        }
        if let Some(ttl) = system.key_ttl {
            builder = builder.key_ttl(ttl.get());
        }
        // Checked with the policy above: refused had any route been wrong.
        let translated = crate::translate::translate(name, system);
        builder = builder.routes(translated.routes);
        if let Some(unrouted) = translated.unrouted {
            builder = builder.unrouted(unrouted);
        }
        if let Some(header) = &system.idempotency_header {
            builder = builder.idempotency_header(header.clone());
        }
        if let Some(retry_on) = system.retry.as_ref().and_then(|r| r.section()?.retry_on.as_ref()) {
            // Lint has already refused unknown names (with the same reading),
            // but a name the client does not know is never replaced by a default.
            let on = RetryOn::from_names(retry_on).map_err(|source| ConfigError::RetryOn {
                system: name.to_owned(),
                file: file(),
                source,
            })?;
            builder = builder.retry_on(on);
        }
        if let Some(timeout) = &system.timeout {
            if let Some(connect) = timeout.connect {
                builder = builder.connect_timeout(connect.get());
            }
            if let Some(read) = timeout.read {
                builder = builder.read_timeout(read.get());
            }
        }
        builder.build().map_err(http)
    }

    /// Every system as an [`HttpSystem`], ordered by name.
    pub fn http_systems(&self) -> Result<Vec<HttpSystem>, ConfigError> {
        self.system_names().map(|name| self.http_system(name)).collect()
    }
}
