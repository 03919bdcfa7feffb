//! `[gateway]`: the outbound gateway of `ballast serve` (`/call/{system}/…`,
//! `/tasks/{id}`) — its keys, its rules, and its settings with the
//! defaults of what a file leaves out.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::finding::KeyFinding;
use crate::listener::{listener, listener_keys, Listener, ListenerSettings, MAX_BODY_LIMIT};
use crate::schema::Schema::{self, Value};
use crate::size::ConfigSize;

/// `[gateway]`: `ballast serve`'s data plane, where services in any language
/// call the external systems through their policies
/// (`/call/{system}/{path}`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct GatewaySection {
    /// `listen`: the gateway's address (default `127.0.0.1:9465`). Any address
    /// but loopback requires `token_env`.
    pub listen: Option<String>,
    /// `max_body`: the largest request body buffered (default `"1MiB"`); a
    /// larger one is answered 413, nothing sent.
    pub max_body: Option<ConfigSize>,
    /// `token_env`: the environment variable holding the token every request
    /// must carry as `Authorization: Bearer <token>`.
    pub token_env: Option<String>,
    /// `max_connections`: connections served at once (default 1024).
    pub max_connections: Option<u64>,
    /// `header_read_timeout`: how long a client may take to send a request's
    /// headers (default 5 s).
    pub header_read_timeout: Option<ConfigDuration>,
    /// `body_read_timeout`: how long a client may take to send a request's
    /// body once its headers are in (default 10 s).
    pub body_read_timeout: Option<ConfigDuration>,
    /// `trust_forwarded`: pass caller-sent `Forwarded`, `X-Forwarded-*`,
    /// `X-Real-IP` and the other client-address headers upstream (default
    /// false: they are dropped, so no caller can speak for another).
    pub trust_forwarded: Option<bool>,
    /// `allowed_hosts`: `Host` names the gateway answers to besides
    /// `localhost`, the loopback addresses and its listen address (the name
    /// services reach it by). Any other `Host` is answered 421: a web page
    /// that rebinds its name to this host cannot call the systems.
    pub allowed_hosts: Option<Vec<String>>,
    /// `max_waiters`: callers of `GET /tasks/{handle}?wait=…` held at once
    /// (default 512, at most half of `max_connections`: a waiting caller
    /// holds its connection); more are answered 503 `too_many_waiters`, as
    /// is a client address past three quarters of them or a task past 8.
    pub max_waiters: Option<u64>,
    /// `callback_hosts`: the hosts (`name:port` for that port, or `name`
    /// alone for 80 and 443 only) a request's `Ballast-Callback` may name;
    /// any other is refused 400, and so is the process's own listener.
    /// Without it, callbacks are refused.
    pub callback_hosts: Option<Vec<String>>,
    /// `callback_secret_env`: the environment variable holding the secret
    /// callbacks are signed with (HMAC-SHA256, at least 16 bytes); required
    /// with `callback_hosts`.
    pub callback_secret_env: Option<String>,
    /// `workers`: event loops serving the gateway, each on a thread of its
    /// own with its own socket (`SO_REUSEPORT`) and upstream pool (default:
    /// one per core).
    pub workers: Option<u64>,
    /// `buffer_answer`: an upstream answer's body up to this size is read
    /// within the attempt and judged as a whole (default `"64KiB"`); a
    /// larger one is judged on its status and headers and streamed to the
    /// caller with this much memory.
    pub buffer_answer: Option<ConfigSize>,
    /// `max_answer`: the most of an answer any system's call reads whole —
    /// a keyed write's, a deferred write's delivery, a followed status, a
    /// periodic call's, an alert webhook's (default `"4MiB"`). A larger
    /// answer fails its attempt as sent (the write may have been applied)
    /// instead of filling the memory; a read the caller takes as a stream
    /// streams past `buffer_answer` as before.
    pub max_answer: Option<ConfigSize>,
    /// `tenant_headers`: headers that say which tenant or account a caller
    /// speaks for, besides its credentials (`Authorization`, `Cookie`,
    /// `Proxy-Authorization`, `X-Api-Key`): a keyed write joins another
    /// in flight or deferred with its key only when these match too.
    pub tenant_headers: Option<Vec<String>>,
    /// `tls_cert_file`: a PEM certificate chain the gateway speaks TLS with
    /// (default: `[serve]`'s, if it names one).
    pub tls_cert_file: Option<String>,
    /// `tls_key_file`: the PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<String>,
}

impl GatewaySection {
    /// The keys it shares with `[serve]`, as one listener's.
    pub(crate) fn listener(&self) -> Listener<'_> {
        listener_keys!(self)
    }
}

/// The largest `[gateway] max_answer`.
pub const MAX_MAX_ANSWER: u64 = 256 << 20;

/// The most event loops `[gateway] workers` may ask for.
pub const MAX_WORKERS: u64 = 256;

/// The largest `[gateway] buffer_answer`.
pub const MAX_BUFFER_ANSWER: u64 = 64 << 20;

pub(crate) const KEYS: &[(&str, Schema)] = &[
    ("listen", Value),
    ("max_body", Value),
    ("token_env", Value),
    ("max_connections", Value),
    ("header_read_timeout", Value),
    ("body_read_timeout", Value),
    ("trust_forwarded", Value),
    ("allowed_hosts", Value),
    ("max_waiters", Value),
    ("tls_cert_file", Value),
    ("tls_key_file", Value),
    ("callback_hosts", Value),
    ("callback_secret_env", Value),
    ("workers", Value),
    ("buffer_answer", Value),
    ("max_answer", Value),
    ("tenant_headers", Value),
];

/// The `[gateway]` section's values.
pub(crate) fn rules(g: &GatewaySection) -> Vec<KeyFinding> {
    let mut out = listener("gateway", g.listener());
    let hosts = g.callback_hosts.as_deref().unwrap_or_default();
    match g.callback_secret_env.as_deref() {
        None if !hosts.is_empty() => out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "callback_secret_env".to_owned()],
            "`callback_hosts` without `callback_secret_env`: callbacks would go unsigned, and a receiver could not tell them from a forgery".into(),
            "name the variable that holds the signing secret, e.g. callback_secret_env = \"BALLAST_CALLBACK_SECRET\"",
        )),
        Some(name) if !crate::alerts::is_env_name(name) => out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "callback_secret_env".to_owned()],
            format!("callback_secret_env {name:?} is not an environment variable name"),
            "name the variable that holds the secret, never the secret itself",
        )),
        _ => {}
    }
    for (i, host) in hosts.iter().enumerate() {
        let plain = !host.is_empty() && !host.contains(['/', '@', '?', '#', ' ']) && !host.contains("://");
        if !plain {
            out.push(KeyFinding::error(
                None,
                vec!["gateway".to_owned(), "callback_hosts".to_owned(), i.to_string()],
                format!("callback_hosts entry {host:?} is not a host name or host:port"),
                "list bare hosts, e.g. \"hooks.shop.example\" or \"10.0.0.5:8443\"",
            ));
        }
    }
    if g.max_waiters == Some(0) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "max_waiters".to_owned()],
            "`max_waiters` is 0: every `GET /tasks/{handle}?wait=…` would be refused".into(),
            "hold at least as many waiting callers as the app waits on at once, e.g. 512 (the default)",
        ));
    }
    let connections = g.max_connections.unwrap_or(1024);
    if let Some(waiters) = g.max_waiters.filter(|w| *w >= connections) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "max_waiters".to_owned()],
            format!(
                "`max_waiters` ({waiters}) is not below `max_connections` ({connections}): callers waiting on tasks could hold every connection, and no write could reach the gateway"
            ),
            "keep it well under max_connections, e.g. half of it (the default)",
        ));
    }
    if g.workers.is_some_and(|w| w == 0 || w > MAX_WORKERS) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "workers".to_owned()],
            format!("`workers` is outside 1..={MAX_WORKERS}"),
            "leave it out for one event loop per core, or set the number of cores the gateway may use",
        ));
    }
    if g.buffer_answer.is_some_and(|b| b.bytes() == 0 || b.bytes() > MAX_BUFFER_ANSWER) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "buffer_answer".to_owned()],
            "`buffer_answer` is outside 1 byte..=64MiB".into(),
            "buffer what the gateway should judge whole, e.g. \"64KiB\" (the default); larger answers stream",
        ));
    }
    if g.max_answer.is_some_and(|b| b.bytes() == 0 || b.bytes() > MAX_MAX_ANSWER) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "max_answer".to_owned()],
            "`max_answer` is outside 1 byte..=256MiB: every call may hold this much memory while it reads".into(),
            "read whole what a caller needs whole, e.g. \"4MiB\" (the default); a read taken as a stream streams",
        ));
    }
    for name in g.tenant_headers.iter().flatten() {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            out.push(KeyFinding::error(
                None,
                vec!["gateway".to_owned(), "tenant_headers".to_owned()],
                format!("`tenant_headers` holds {name:?}, which is no header name"),
                "name headers as a caller sends them, e.g. [\"x-tenant-id\"]",
            ));
        }
    }
    if g.max_body.is_some_and(|b| b.bytes() == 0 || b.bytes() > MAX_BODY_LIMIT) {
        out.push(KeyFinding::error(
            None,
            vec!["gateway".to_owned(), "max_body".to_owned()],
            "`max_body` is outside 1 byte..=1GiB".into(),
            "use the largest body a call needs, e.g. \"1MiB\" (the default)",
        ));
    }
    out
}

/// The outbound gateway of `ballast serve` (`/call/{system}/…`,
/// `/tasks/{id}`), from `[gateway]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Where it listens, its limits, who may call it, its TLS (`[gateway]`'s
    /// files, else `[serve]`'s).
    pub listener: ListenerSettings,
    /// The largest request body buffered, in bytes.
    pub max_body: usize,
    /// Whether caller-sent `Forwarded`, `X-Forwarded-*` and `X-Real-IP` are
    /// passed upstream (default false: dropped).
    pub trust_forwarded: bool,
    /// Callers of `GET /tasks/{handle}?wait=…` held at once.
    pub max_waiters: usize,
    /// The hosts a `Ballast-Callback` may name.
    pub callback_hosts: Vec<String>,
    /// The variable holding the callbacks' signing secret.
    pub callback_secret_env: Option<String>,
    /// Event loops serving the gateway; `None`: one per core.
    pub workers: Option<usize>,
    /// An answer's body past this many bytes is streamed.
    pub buffer_answer: usize,
}

impl Default for GatewaySettings {
    /// Loopback port 9465, 1024 connections, the listeners' shared defaults
    /// ([`ListenerSettings::on`]), 1 MiB bodies, a loop per core, answers
    /// streamed past 64 KiB.
    fn default() -> Self {
        Self {
            listener: ListenerSettings::on(SocketAddr::from(([127, 0, 0, 1], 9465)), 1024),
            max_body: 1 << 20,
            trust_forwarded: false,
            max_waiters: 512,
            callback_hosts: Vec::new(),
            callback_secret_env: None,
            workers: None,
            buffer_answer: 64 << 10,
        }
    }
}
