//! The composition root: the running parts of a checked configuration —
//! each system's [`HttpSystem`] (its client, its policy with metrics
//! attached, headers and the seal key read from the environment), the
//! durable [`Queue`] with its schedule, the [`Worker`]'s builder and the
//! [`Retention`] — built from the settings `ballast-config` hands out, so a
//! service runs exactly what `ballast lint` checked.
//!
//! ```
//! use ballast_config::Config;
//!
//! let config = Config::parse("inline.toml", r#"
//!     [systems.sber]
//!     base_url = "http://127.0.0.1:8080"
//!     dedupes_by_key = true
//!     key_ttl = "24h"
//!     critical = true
//!     [systems.sber.retry]
//!     max_attempts = 3
//!     [systems.sber.timeout]
//!     attempt = "1s"
//! "#).unwrap();
//! let sber = ballast_server::build::http_system(&config, "sber").unwrap();
//! assert!(sber.is_critical() && sber.dedupes_by_key());
//! ```

use std::collections::BTreeMap;

use ballast::Policy;
use ballast_config::{Config, ConfigError, GatewaySettings, HttpSettings, PeriodicSettings, QueueSettings};
use ballast_http::delivery::CallbackPolicy;
use ballast_http::metrics::SystemMetrics;
use ballast_http::{HttpSystem, SealError, SealKey, SystemBuildError};
use ballast_queue::{Queue, Retention, Worker, WorkerBuilder};

/// Why a running part of the configuration was not built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The configuration refused it (lint errors, an unknown system, no `base_url`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP client of a system could not be built.
    #[error("[systems.{system}] in {file}: {source}")]
    Http {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// What the HTTP crate refused.
        source: SystemBuildError,
    },
    /// A `[systems.NAME.headers]` value's variable is not set.
    #[error(
        "[systems.{system}.headers] {header} comes from {var}, which is not set (or empty): export it before \
         `ballast serve` starts"
    )]
    HeaderEnvUnset {
        /// The system.
        system: String,
        /// The header.
        header: String,
        /// The variable.
        var: String,
    },
    /// `[queue] seal_key_env` names a variable that holds no usable key.
    #[error("[queue] seal_key_env names {var}: {source}")]
    SealKey {
        /// The variable.
        var: String,
        /// Why the key is unusable (its value is never shown).
        source: SealError,
    },
    /// `[gateway] callback_secret_env` names a variable that is unset or
    /// too short to sign with.
    #[error(
        "[gateway] callback_secret_env names {var}, which is not set or shorter than {MIN_CALLBACK_SECRET} bytes: \
         export a random secret (e.g. `openssl rand -hex 32`) that the callbacks' receivers share"
    )]
    CallbackSecret {
        /// The variable.
        var: String,
    },
    /// A variable a system's connection needs (a PKCS#12 password, the
    /// proxy's credentials, the OAuth 2.0 client id or secret) is not set.
    #[error(
        "[systems.{system}] {key} names {var}, which is not set (or empty): export it before `ballast serve` starts"
    )]
    ConnectionEnvUnset {
        /// The system.
        system: String,
        /// The key naming the variable.
        key: &'static str,
        /// The variable.
        var: String,
    },
    /// A system's policy was refused by the core. Lint runs the core's own
    /// checks first, so a checked file does not get here.
    #[error("[systems.{system}] in {file}: {source}")]
    Policy {
        /// The system.
        system: String,
        /// The file.
        file: String,
        /// The core's refusal, with its rule ids.
        source: ballast::BuildError,
    },
    /// A system's default `callback` is not one callbacks may go to.
    #[error("[systems.{system}] callback: {source}")]
    Callback {
        /// The system.
        system: String,
        /// Why.
        source: ballast_http::delivery::CallbackRefused,
    },
}

/// Each system's default `callback`, checked against `policy`: refused at
/// start rather than failing each delivery's callback later.
pub fn check_callbacks(systems: &[HttpSystem], policy: &CallbackPolicy) -> Result<(), BuildError> {
    for system in systems {
        if let Some(url) = system.default_callback() {
            policy
                .check(url)
                .map_err(|source| BuildError::Callback { system: system.name().to_owned(), source })?;
        }
    }
    Ok(())
}

/// The shortest callback signing secret taken.
pub const MIN_CALLBACK_SECRET: usize = 16;

/// Where callbacks may go and what signs them, from `[gateway]`
/// `callback_hosts` and the variable `callback_secret_env` names: none
/// allowed without them.
pub fn callbacks(gateway: Option<&GatewaySettings>) -> Result<CallbackPolicy, BuildError> {
    let Some(g) = gateway.filter(|g| !g.callback_hosts.is_empty()) else {
        return Ok(CallbackPolicy::new(Vec::<String>::new(), Vec::new()));
    };
    // Lint refuses callback_hosts without the variable's name.
    let var = g.callback_secret_env.clone().unwrap_or_default();
    match std::env::var(&var) {
        Ok(secret) if secret.len() >= MIN_CALLBACK_SECRET => {
            Ok(CallbackPolicy::new(&g.callback_hosts, secret.into_bytes()))
        }
        _ => Err(BuildError::CallbackSecret { var }),
    }
}

/// The running policy of system `name`, built from the builder the checked
/// file declares ([`Config::policy_builder`]). Refused when the system has
/// lint errors or is unknown.
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
/// let policy = ballast_server::build::policy(&config, "sber").unwrap();
/// assert_eq!(policy.retry().max_attempts(), 3);
/// assert!(ballast_server::build::policy(&config, "sbr").unwrap_err().to_string().contains("did you mean"));
/// ```
pub fn policy(config: &Config, name: &str) -> Result<Policy, BuildError> {
    config.policy_builder(name)?.build().map_err(|source| BuildError::Policy {
        system: name.to_owned(),
        file: config.source().name().to_owned(),
        source,
    })
}

/// Every system's running policy, by name.
pub fn policies(config: &Config) -> Result<BTreeMap<String, Policy>, BuildError> {
    config.system_names().map(|name| Ok((name.to_owned(), policy(config, name)?))).collect()
}

/// The HTTP system `name`: its client (base URL, connect and read timeouts,
/// the idempotency header, `retry_on`, routes), its policy with a
/// [`SystemMetrics`] listener attached, headers and the seal key read from
/// the environment. Refused when the system has lint errors, no `base_url`,
/// or a variable it names is unset.
pub fn http_system(config: &Config, name: &str) -> Result<HttpSystem, BuildError> {
    let settings = config.http_settings(name)?;
    from_settings(settings, config.source().name())
}

/// Every system as an [`HttpSystem`], ordered by name.
pub fn http_systems(config: &Config) -> Result<Vec<HttpSystem>, BuildError> {
    config.system_names().map(|name| http_system(config, name)).collect()
}

fn from_settings(settings: HttpSettings, file: &str) -> Result<HttpSystem, BuildError> {
    let HttpSettings { name, policy, base_url, .. } = &settings;
    let policy = policy.clone().listener(SystemMetrics::register(name));
    let http = |source| BuildError::Http { system: name.clone(), file: file.to_owned(), source };
    // The policy was built for this same name, with the checks lint runs.
    let mut builder = HttpSystem::builder(name, base_url)
        .policy(|_| policy)
        .dedupes_by_key(settings.dedupes_by_key)
        .critical(settings.critical)
        .routes(settings.routes.clone());
    for (header, var) in &settings.headers {
        let value = std::env::var(var).ok().filter(|v| !v.is_empty()).ok_or_else(|| {
            BuildError::HeaderEnvUnset { system: name.clone(), header: header.clone(), var: var.clone() }
        })?;
        builder = builder.header(header, &value);
    }
    if let Some(var) = &settings.seal_key_env {
        let text = std::env::var(var).unwrap_or_default();
        let key =
            SealKey::from_text(&text).map_err(|source| BuildError::SealKey { var: var.clone(), source })?;
        builder = builder.seal_key(key);
    }
    if let Some(bytes) = settings.keep_answer {
        builder = builder.keep_answer(bytes);
    }
    if let Some(bytes) = settings.max_answer {
        builder = builder.max_answer(bytes);
    }
    builder = builder.seal_answers(settings.seal_answers);
    if let Some(url) = &settings.callback {
        builder = builder.default_callback(url);
    }
    if !settings.seal_headers.is_empty() {
        builder = builder.seal_headers(&settings.seal_headers);
    }
    if !settings.tenant_headers.is_empty() {
        builder = builder.caller_headers(&settings.tenant_headers);
    }
    if let Some(ttl) = settings.key_ttl {
        builder = builder.key_ttl(ttl);
    }
    if let Some(unrouted) = settings.unrouted {
        builder = builder.unrouted(unrouted);
    }
    if let Some(header) = &settings.idempotency_header {
        builder = builder.idempotency_header(header.clone());
    }
    if let Some(retry_on) = settings.retry_on {
        builder = builder.retry_on(retry_on);
    }
    if let Some(connect) = settings.connect_timeout {
        builder = builder.connect_timeout(connect);
    }
    if let Some(read) = settings.read_timeout {
        builder = builder.read_timeout(read);
    }
    if let Some(stream) = settings.stream_timeout {
        builder = builder.stream_timeout(stream);
    }
    builder = connection(builder, name, file, &settings.connection)?;
    builder.build().map_err(http)
}

/// `connection`'s TLS, proxy, HTTP/2 and OAuth 2.0 settings on `builder`,
/// their secrets read from the variables they name.
fn connection(
    mut builder: ballast_http::HttpSystemBuilder,
    system: &str,
    file: &str,
    connection: &ballast_config::ConnectionSettings,
) -> Result<ballast_http::HttpSystemBuilder, BuildError> {
    use ballast_http::credential::{ClientAuth, OAuth2, Secret};
    let var = |key: &'static str, var: &str| {
        std::env::var(var).ok().filter(|v| !v.is_empty()).ok_or_else(|| BuildError::ConnectionEnvUnset {
            system: system.to_owned(),
            key,
            var: var.to_owned(),
        })
    };
    if let Some(mut tls) = connection.tls.clone() {
        if let (Some(ballast_http::IdentityFiles::Pkcs12 { password, .. }), Some(env)) =
            (&mut tls.identity, &connection.pkcs12_password_env)
        {
            *password = Secret::new(var("tls.pkcs12_password_env", env)?);
        }
        builder = builder.tls(tls);
    }
    let proxy = match &connection.proxy {
        ballast_config::ProxySetting::Environment => None,
        ballast_config::ProxySetting::Direct => Some(ballast_http::Proxy::Direct),
        ballast_config::ProxySetting::Url(url) => {
            let proxy = ballast_http::Proxy::via(url).map_err(|e| BuildError::Http {
                system: system.to_owned(),
                file: file.to_owned(),
                source: e.into(),
            })?;
            Some(match &connection.proxy_auth_env {
                None => proxy,
                Some(env) => {
                    let credentials = var("proxy_auth_env", env)?;
                    let (user, password) = credentials.split_once(':').unwrap_or((&credentials, ""));
                    proxy.basic_auth(user, password)
                }
            })
        }
    };
    if let Some(proxy) = proxy {
        builder = builder.proxy(proxy);
    }
    if !connection.http2 {
        builder = builder.http2(false);
    }
    if let Some(oauth) = &connection.oauth2 {
        let how = ClientAuth::from_word(&oauth.client_auth).unwrap_or_default();
        let mut grant =
            OAuth2::new(&oauth.token_url, var("auth.client_id_env", &oauth.client_id_env)?).client_auth(how);
        if let Some(env) = oauth.client_secret_env.as_deref().filter(|_| how != ClientAuth::Tls) {
            grant = grant.secret(Secret::new(var("auth.client_secret_env", env)?));
        }
        if let Some(scope) = &oauth.scope {
            grant = grant.scope(scope);
        }
        if let Some(audience) = &oauth.audience {
            grant = grant.audience(audience);
        }
        if let Some(timeout) = oauth.timeout {
            grant = grant.timeout(timeout);
        }
        builder = builder.oauth2(grant);
    }
    Ok(builder)
}

/// Opens the queue's database with `settings`' schedule: tasks enqueued
/// through it get its `max_attempts`, workers built on it its backoff and
/// poll interval.
pub async fn queue(settings: &QueueSettings) -> ballast_queue::Result<Queue> {
    Ok(Queue::connect(&settings.url).await?.with_schedule(settings.schedule))
}

/// A worker builder for `queue` (from [`queue()`]) with `settings`' lease
/// and `periodic` (from [`periodic()`]); add handlers and build.
pub fn worker(
    settings: &QueueSettings,
    queue: Queue,
    periodic: Vec<ballast_queue::Periodic>,
) -> WorkerBuilder {
    periodic.into_iter().fold(Worker::builder(queue).lease(settings.lease), WorkerBuilder::periodic)
}

/// The periodic calls of `[queue.periodic.*]` on `queue`, as the worker
/// enqueues them (and the dashboard shows them); one whose request cannot be
/// made (its path, say) is refused here, naming it.
pub fn periodic(
    settings: &QueueSettings,
    queue: &Queue,
) -> Result<Vec<ballast_queue::Periodic>, crate::ServeError> {
    settings.periodic.iter().map(|p| periodic_delivery(p, queue)).collect()
}

/// A `[queue.periodic.NAME]` call as a periodic delivery: each period's task
/// sends the request with the period's key, through the system's policy,
/// retried and alerted like any deferred write.
fn periodic_delivery(
    settings: &PeriodicSettings,
    queue: &Queue,
) -> Result<ballast_queue::Periodic, crate::ServeError> {
    let mut request = ballast_http::Request::new(settings.method.clone(), &settings.path);
    if let Some(body) = &settings.body {
        request = request.body(body.clone());
    }
    // A configured request holds no caller's credentials: nothing to seal.
    let delivery = ballast_http::Delivery::from_request(settings.system.clone(), &request)
        .map_err(|e| crate::ServeError::Periodic { name: settings.name.clone(), reason: e.to_string() })?;
    let mut periodic = queue
        .periodic(ballast_http::DELIVERY_KIND, settings.schedule.clone())
        .name(&settings.name)
        .payload(&delivery)
        .catch_up(settings.catch_up)
        .jitter(settings.jitter);
    if let Some(attempts) = settings.max_attempts {
        periodic = periodic.max_attempts(attempts);
    }
    Ok(periodic)
}

/// The pruning of final tasks with `settings`' retentions; spawn it beside the worker.
pub fn retention(settings: &QueueSettings) -> Retention {
    Retention::default().completed(settings.retain_completed).failed(settings.retain_failed)
}
