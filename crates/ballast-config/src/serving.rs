//! How `ballast serve` listens: the admin listener (`[serve]`) and the
//! outbound gateway (`[gateway]`), with the defaults of what a file leaves out.

use std::net::SocketAddr;
use std::time::Duration;

use crate::build::ConfigError;
use crate::config::Config;
use crate::finding::{Finding, KeyFinding};

/// The admin listener of `ballast serve` (`/metrics`, `/health/*`, `/ui/`),
/// from `[serve]` (defaults without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSettings {
    /// The admin listener's address.
    pub listen: SocketAddr,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// The environment variable holding the admin token, if any.
    pub token_env: Option<String>,
    /// Whether `/metrics` and `/health/*` ask for the token too.
    pub protect_metrics: bool,
    /// How often the queue's counts are refreshed.
    pub stats_interval: Duration,
    /// How long a client may take to send a request's body.
    pub body_read_timeout: Duration,
    /// Host names the admin listener answers to besides its own
    /// (`localhost`, the loopback addresses, the listen address).
    pub allowed_hosts: Vec<String>,
    /// How long a dashboard session lasts.
    pub session_ttl: Duration,
}

impl Default for ServeSettings {
    /// Loopback port 9464, 256 connections, 5 s for headers, no token (open
    /// metrics), counts every 5 s.
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            max_connections: 256,
            header_read_timeout: Duration::from_secs(5),
            token_env: None,
            protect_metrics: false,
            stats_interval: Duration::from_secs(5),
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            allowed_hosts: Vec::new(),
            session_ttl: DEFAULT_SESSION_TTL,
        }
    }
}

/// How long a client may take to send a request's body, on both listeners,
/// unless `body_read_timeout` says otherwise (10 s: nginx's `client_body_timeout` is 60 s for the
/// open internet; a service on the same network needs far less).
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a dashboard session lasts unless `[serve] session_ttl` says otherwise (12 h).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The outbound gateway of `ballast serve` (`/call/{system}/…`,
/// `/tasks/{id}`), from `[gateway]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// The gateway's address.
    pub listen: SocketAddr,
    /// The largest request body buffered, in bytes.
    pub max_body: usize,
    /// The environment variable holding the token, if any.
    pub token_env: Option<String>,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body.
    pub body_read_timeout: Duration,
    /// Whether caller-sent `Forwarded`, `X-Forwarded-*` and `X-Real-IP` are
    /// passed upstream (default false: dropped).
    pub trust_forwarded: bool,
    /// `Host` names the gateway answers to besides `localhost`, the loopback
    /// addresses and its listen address; any other is answered 421.
    pub allowed_hosts: Vec<String>,
}

impl Default for GatewaySettings {
    /// Loopback port 9465, 1 MiB bodies, no token, 1024 connections, 5 s for
    /// headers.
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9465)),
            max_body: 1 << 20,
            token_env: None,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(5),
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            trust_forwarded: false,
            allowed_hosts: Vec::new(),
        }
    }
}

/// What an alert webhook expects to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertFormat {
    /// ballast's own JSON document: the failed task's fields and the rule.
    Json,
    /// A Slack incoming webhook's `{"text": …}`.
    Slack,
    /// The body of Alertmanager's `POST /api/v2/alerts`.
    Alertmanager,
}

/// One `[[alerts.webhook]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The environment variable holding its URL.
    pub url_env: String,
    /// What it expects.
    pub format: AlertFormat,
    /// Whether it deduplicates by `Idempotency-Key`, so a post may be retried.
    pub dedupes_by_key: bool,
    /// How long one post may take.
    pub timeout: Duration,
}

impl Config {
    /// The alert webhooks of `[alerts]` (none without it). Refused when
    /// `[alerts]` has lint errors.
    pub fn alerts(&self) -> Result<Vec<WebhookSettings>, ConfigError> {
        let Some(alerts) = &self.file.alerts else { return Ok(Vec::new()) };
        self.refuse("alerts", crate::rules::alerts(alerts))?;
        let hooks = alerts.webhook.iter().flatten().map(|hook| {
            let format = match hook.format.as_deref() {
                Some("slack") => AlertFormat::Slack,
                Some("alertmanager") => AlertFormat::Alertmanager,
                _ => AlertFormat::Json,
            };
            WebhookSettings {
                url_env: hook.url_env.clone().unwrap_or_default(),
                format,
                dedupes_by_key: hook.dedupes_by_key.unwrap_or(format == AlertFormat::Alertmanager),
                timeout: hook.timeout.map_or(Duration::from_secs(5), |d| d.get()),
            }
        });
        Ok(hooks.collect())
    }

    /// The admin listener's settings: `[serve]` over [`ServeSettings::default`].
    /// Refused when `[serve]` has lint errors.
    pub fn serve(&self) -> Result<ServeSettings, ConfigError> {
        let defaults = ServeSettings::default();
        let Some(serve) = &self.file.serve else { return Ok(defaults) };
        self.refuse("serve", crate::rules::serve(serve))?;
        Ok(ServeSettings {
            listen: serve.listen.as_deref().and_then(|l| l.parse().ok()).unwrap_or(defaults.listen),
            max_connections: count(serve.max_connections).unwrap_or(defaults.max_connections),
            header_read_timeout: serve.header_read_timeout.map_or(defaults.header_read_timeout, |d| d.get()),
            token_env: serve.token_env.clone(),
            protect_metrics: serve.protect_metrics.unwrap_or(false),
            stats_interval: serve.stats_interval.map_or(defaults.stats_interval, |d| d.get()),
            body_read_timeout: serve.body_read_timeout.map_or(defaults.body_read_timeout, |d| d.get()),
            allowed_hosts: serve.allowed_hosts.clone().unwrap_or_default(),
            session_ttl: serve.session_ttl.map_or(defaults.session_ttl, |d| d.get()),
        })
    }

    /// The gateway's settings, `None` without a `[gateway]` section: `[gateway]`
    /// over [`GatewaySettings::default`]. Refused when it has lint errors.
    pub fn gateway(&self) -> Result<Option<GatewaySettings>, ConfigError> {
        let Some(gateway) = &self.file.gateway else { return Ok(None) };
        self.refuse("gateway", crate::rules::gateway(gateway))?;
        let defaults = GatewaySettings::default();
        Ok(Some(GatewaySettings {
            listen: gateway.listen.as_deref().and_then(|l| l.parse().ok()).unwrap_or(defaults.listen),
            max_body: gateway
                .max_body
                .map_or(defaults.max_body, |b| usize::try_from(b.bytes()).unwrap_or(usize::MAX)),
            token_env: gateway.token_env.clone(),
            max_connections: count(gateway.max_connections).unwrap_or(defaults.max_connections),
            header_read_timeout: gateway
                .header_read_timeout
                .map_or(defaults.header_read_timeout, |d| d.get()),
            body_read_timeout: gateway.body_read_timeout.map_or(defaults.body_read_timeout, |d| d.get()),
            trust_forwarded: gateway.trust_forwarded.unwrap_or(false),
            allowed_hosts: gateway.allowed_hosts.clone().unwrap_or_default(),
        }))
    }

    /// `Err` with the errors among `problems` of `section`, if any.
    pub(crate) fn refuse(&self, section: &str, problems: Vec<KeyFinding>) -> Result<(), ConfigError> {
        let errors: Vec<Finding> = problems
            .into_iter()
            .filter(|p| p.severity == ballast::Severity::Error)
            .map(|p| p.locate(&self.source, &self.index))
            .collect();
        if errors.is_empty() {
            return Ok(());
        }
        let file = self.source.name().to_owned();
        Err(ConfigError::Refused { section: section.to_owned(), file, findings: errors })
    }
}

fn count(n: Option<u64>) -> Option<usize> {
    n.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}
