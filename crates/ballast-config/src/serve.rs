//! `[serve]`: the admin listener of `ballast serve` (`/metrics`,
//! `/health/*`, `/ui/`) — its keys, its rules, and its settings with the
//! defaults of what a file leaves out.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::finding::KeyFinding;
use crate::listener::{listener, listener_keys, Listener, ListenerSettings};
use crate::schema::Schema::{self, Value};

/// `[serve]`: the admin listener of `ballast serve` (`/metrics`, `/health/*`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ServeSection {
    /// `listen`: the admin listener's address (default in
    /// [`ServeSettings::default`](crate::ServeSettings), `127.0.0.1:9464`); `--listen` overrides it.
    pub listen: Option<String>,
    /// `max_connections`: connections served at once; more wait to be
    /// accepted (default in [`ServeSettings::default`](crate::ServeSettings), 256).
    pub max_connections: Option<u64>,
    /// `header_read_timeout`: how long a client may take to send a request's
    /// headers before the connection is closed (default in
    /// [`ServeSettings::default`](crate::ServeSettings), 5 s).
    pub header_read_timeout: Option<ConfigDuration>,
    /// `token_env`: the environment variable holding the token the admin
    /// listener asks for (required on any address but loopback).
    pub token_env: Option<String>,
    /// `protect_metrics`: whether `/metrics` and `/health/*` ask for the token
    /// too (default false: scrapers and probes need none).
    pub protect_metrics: Option<bool>,
    /// `stats_interval`: how often the queue's counts are refreshed for
    /// `/metrics` and readiness (default in [`ServeSettings::default`](crate::ServeSettings), 5 s).
    pub stats_interval: Option<ConfigDuration>,
    /// `body_read_timeout`: how long a client may take to send a request's
    /// body once its headers are in (default 10 s); a slower one is answered
    /// 408 and its connection closed.
    pub body_read_timeout: Option<ConfigDuration>,
    /// `allowed_hosts`: `Host` names the admin listener answers to besides
    /// `localhost`, the loopback addresses and its listen address (e.g. the
    /// name a reverse proxy forwards). Any other `Host` is answered 421: a web
    /// page that rebinds its name to this host gets nothing.
    pub allowed_hosts: Option<Vec<String>>,
    /// `session_ttl`: how long a dashboard login lasts (default 12 h).
    pub session_ttl: Option<ConfigDuration>,
    /// `remove_systems`: systems this file removes on purpose. A reload
    /// (SIGHUP) that removes a system with unfinished deliveries is refused
    /// unless the system is named here; its deliveries are then held until a
    /// system of that name returns or they age out (`[queue] max_age`).
    pub remove_systems: Option<Vec<String>>,
    /// `drain_delay`: after SIGTERM (or `POST /admin/drain`), how long the
    /// listeners keep accepting and serving while readiness already answers
    /// 503, so load balancers stop sending (default 5 s).
    pub drain_delay: Option<ConfigDuration>,
    /// `drain_timeout`: once the listeners stop accepting, how long calls in
    /// flight may take to finish before each is answered at the deadline
    /// (default 25 s).
    pub drain_timeout: Option<ConfigDuration>,
    /// `tls_cert_file`: a PEM certificate chain the admin listener — and
    /// the gateway, unless `[gateway]` names its own — speaks TLS with.
    pub tls_cert_file: Option<String>,
    /// `tls_key_file`: the PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<String>,
}

impl ServeSection {
    /// The keys it shares with `[gateway]`, as one listener's.
    pub(crate) fn listener(&self) -> Listener<'_> {
        listener_keys!(self)
    }
}

pub(crate) const KEYS: &[(&str, Schema)] = &[
    ("listen", Value),
    ("max_connections", Value),
    ("header_read_timeout", Value),
    ("token_env", Value),
    ("protect_metrics", Value),
    ("stats_interval", Value),
    ("body_read_timeout", Value),
    ("allowed_hosts", Value),
    ("session_ttl", Value),
    ("remove_systems", Value),
    ("drain_delay", Value),
    ("drain_timeout", Value),
    ("tls_cert_file", Value),
    ("tls_key_file", Value),
];

/// The `[serve]` section's values.
pub(crate) fn rules(s: &ServeSection) -> Vec<KeyFinding> {
    let mut out = listener("serve", s.listener());
    if s.protect_metrics == Some(true) && s.token_env.is_none() {
        out.push(KeyFinding::error(
            None,
            vec!["serve".to_owned(), "protect_metrics".to_owned()],
            "`protect_metrics` asks scrapers for a token, but [serve] names no `token_env`".into(),
            "set `token_env`, or drop `protect_metrics`",
        ));
    }
    if s.session_ttl.is_some_and(|d| d.get().is_zero()) {
        out.push(KeyFinding::error(
            None,
            vec!["serve".to_owned(), "session_ttl".to_owned()],
            "`session_ttl` is zero: every dashboard login would end at once".into(),
            "use hours, e.g. \"12h\" (the default)",
        ));
    }
    if s.drain_timeout.is_some_and(|d| d.get().is_zero()) {
        out.push(KeyFinding::error(
            None,
            vec!["serve".to_owned(), "drain_timeout".to_owned()],
            "`drain_timeout` is zero: every call in flight at a restart would be cut short".into(),
            "give calls time to finish, e.g. \"25s\" (the default); each one still running then is answered, never reset",
        ));
    }
    let drain = s.drain_delay.map_or(DEFAULT_DRAIN_DELAY, |d| d.get())
        + s.drain_timeout.map_or(DEFAULT_DRAIN_TIMEOUT, |d| d.get());
    if drain > Duration::from_secs(600) {
        out.push(KeyFinding::at(
            None,
            ballast::Severity::Warning,
            vec!["serve".to_owned(), "drain_timeout".to_owned()],
            format!("a drain may take {}: a deploy waits that long for each replica", crate::duration::display(drain)),
            "keep drain_delay + drain_timeout within a few minutes, and terminationGracePeriodSeconds above it",
        ));
    }
    if s.stats_interval.is_some_and(|d| d.get() < Duration::from_secs(1)) {
        out.push(KeyFinding::error(
            None,
            vec!["serve".to_owned(), "stats_interval".to_owned()],
            "`stats_interval` is under 1 s: counting the queue that often loads its database".into(),
            "use a few seconds, e.g. \"5s\"",
        ));
    }
    out
}

/// The admin listener of `ballast serve` (`/metrics`, `/health/*`, `/ui/`),
/// from `[serve]` (defaults without it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSettings {
    /// Where it listens, its limits, who may call it, its TLS.
    pub listener: ListenerSettings,
    /// Whether `/metrics` and `/health/*` ask for the token too.
    pub protect_metrics: bool,
    /// How often the queue's counts are refreshed.
    pub stats_interval: Duration,
    /// How long a dashboard session lasts.
    pub session_ttl: Duration,
    /// How long the listeners keep serving after a drain begins, readiness
    /// already 503.
    pub drain_delay: Duration,
    /// How long calls in flight may take once the listeners stop accepting.
    pub drain_timeout: Duration,
}

impl Default for ServeSettings {
    /// Loopback port 9464, 256 connections, the listeners' shared defaults
    /// ([`ListenerSettings::on`]), open metrics, counts every 5 s.
    fn default() -> Self {
        Self {
            listener: ListenerSettings::on(SocketAddr::from(([127, 0, 0, 1], 9464)), 256),
            protect_metrics: false,
            stats_interval: Duration::from_secs(5),
            session_ttl: DEFAULT_SESSION_TTL,
            drain_delay: DEFAULT_DRAIN_DELAY,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// How long the listeners keep serving after a drain begins unless
/// `[serve] drain_delay` says otherwise (5 s: a load balancer polling
/// readiness every second or two has stopped sending by then).
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(5);

/// How long calls in flight may take to finish in a drain unless
/// `[serve] drain_timeout` says otherwise (25 s: with the default delay a
/// drain ends within 30 s; Kubernetes' `terminationGracePeriodSeconds`
/// should then be at least 35).
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// How long a dashboard session lasts unless `[serve] session_ttl` says otherwise (12 h).
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
