//! What each `[systems.NAME]` says its HTTP client is — the settings the
//! composition root (`ballast-server`) builds a `ballast_http::HttpSystem`
//! from, read from the very values the checker checked. Nothing here runs:
//! headers taken from the environment and the seal key are named, not read.

use std::time::Duration;

use ballast::PolicyBuilder;
use ballast_vocab::http::routes::{Routes, Unrouted};
use ballast_vocab::http::RetryOn;

use crate::config::Config;
use crate::error::ConfigError;

/// The HTTP client of one system as its section declares it; see
/// [`Config::http_settings`].
#[derive(Clone)]
pub struct HttpSettings {
    /// The system's name.
    pub name: String,
    /// Its policy, checked: add listeners, then build.
    pub policy: PolicyBuilder,
    /// `base_url`, checked by the client's own parser.
    pub base_url: String,
    /// `dedupes_by_key`.
    pub dedupes_by_key: bool,
    /// `critical`: its breaker open makes the service unready.
    pub critical: bool,
    /// `key_ttl`, if given.
    pub key_ttl: Option<Duration>,
    /// `[systems.NAME.headers]`: each header and the environment variable
    /// its value comes from.
    pub headers: Vec<(String, String)>,
    /// `[systems.NAME.routes]`, with `path_case`.
    pub routes: Routes,
    /// `unrouted`, if given.
    pub unrouted: Option<Unrouted>,
    /// `idempotency_header`, if given.
    pub idempotency_header: Option<String>,
    /// `retry.retry_on`, if given.
    pub retry_on: Option<RetryOn>,
    /// `timeout.connect`, if given.
    pub connect_timeout: Option<Duration>,
    /// `timeout.read`, if given.
    pub read_timeout: Option<Duration>,
    /// `timeout.stream`, if given.
    pub stream_timeout: Option<Duration>,
    /// `[queue] seal_key_env`: the variable holding the key deferred
    /// deliveries are sealed with.
    pub seal_key_env: Option<String>,
    /// `[queue] seal_headers`: headers sealed besides `Authorization`.
    pub seal_headers: Vec<String>,
    /// `callback`: the default callback of its deferred writes, if any.
    pub callback: Option<String>,
    /// `[queue] keep_answer`, in bytes, if given.
    pub keep_answer: Option<usize>,
    /// `[queue] seal_answers`.
    pub seal_answers: bool,
    /// `[gateway] max_answer`, in bytes, if given: the most of an answer read whole.
    pub max_answer: Option<usize>,
    /// `[gateway] tenant_headers`: what says who is asking, besides credentials.
    pub tenant_headers: Vec<String>,
    /// How the system is reached: TLS, proxy, HTTP/2, OAuth 2.0.
    pub connection: crate::systems::connection::ConnectionSettings,
}

impl Config {
    /// The HTTP client system `name` declares. Refused when the system has
    /// lint errors or no `base_url`.
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
    /// let sber = config.http_settings("sber").unwrap();
    /// assert!(sber.critical && sber.dedupes_by_key);
    /// assert_eq!(sber.base_url, "http://127.0.0.1:8080");
    /// ```
    pub fn http_settings(&self, name: &str) -> Result<HttpSettings, ConfigError> {
        let policy = self.policy_builder(name)?;
        let file = || self.source.name().to_owned();
        let system = self.system(name).ok_or_else(|| ConfigError::UnknownSystem {
            name: name.to_owned(),
            file: file(),
            suggestion: None,
        })?;
        let base_url = system
            .base_url
            .clone()
            .ok_or_else(|| ConfigError::NoBaseUrl { system: name.to_owned(), file: file() })?;
        // Checked with the policy above: refused had any route been wrong.
        let translated = crate::systems::translate::translate(name, system);
        let retry_on = match system.retry.as_ref().and_then(|r| r.section()?.retry_on.as_ref()) {
            // Lint has already refused unknown names (with the same reading),
            // but a name the client does not know is never replaced by a default.
            Some(names) => Some(RetryOn::from_names(names).map_err(|source| ConfigError::RetryOn {
                system: name.to_owned(),
                file: file(),
                source,
            })?),
            None => None,
        };
        let queue = self.file.queue.as_ref();
        Ok(HttpSettings {
            name: name.to_owned(),
            policy,
            base_url,
            dedupes_by_key: system.dedupes_by_key.unwrap_or(false),
            critical: system.critical.unwrap_or(false),
            key_ttl: system.key_ttl.map(|ttl| ttl.get()),
            headers: system
                .headers
                .iter()
                .flatten()
                .map(|(header, source)| (header.clone(), source.env.clone().unwrap_or_default()))
                .collect(),
            routes: translated.routes,
            unrouted: translated.unrouted,
            idempotency_header: system.idempotency_header.clone(),
            retry_on,
            connect_timeout: system.timeout.as_ref().and_then(|t| t.connect).map(|d| d.get()),
            read_timeout: system.timeout.as_ref().and_then(|t| t.read).map(|d| d.get()),
            stream_timeout: system.timeout.as_ref().and_then(|t| t.stream).map(|d| d.get()),
            seal_key_env: queue.and_then(|q| q.seal_key_env.clone()),
            seal_headers: queue.and_then(|q| q.seal_headers.clone()).unwrap_or_default(),
            callback: system.callback.clone(),
            keep_answer: queue
                .and_then(|q| q.keep_answer)
                .map(|b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)),
            seal_answers: queue.and_then(|q| q.seal_answers).unwrap_or(false),
            max_answer: self
                .file
                .gateway
                .as_ref()
                .and_then(|g| g.max_answer)
                .map(|b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)),
            tenant_headers: self
                .file
                .gateway
                .as_ref()
                .and_then(|g| g.tenant_headers.clone())
                .unwrap_or_default(),
            connection: crate::systems::connection::settings(&self.dir(), system),
        })
    }

    /// Every system's HTTP client settings, ordered by name.
    pub fn http_settings_all(&self) -> Result<Vec<HttpSettings>, ConfigError> {
        self.system_names().map(|name| self.http_settings(name)).collect()
    }
}
