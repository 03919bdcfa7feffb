//! What each `[systems.NAME]` says its HTTP client is — the settings the
//! composition root (`ballast-server`) builds a `ballast_http::HttpSystem`
//! from, read from the very values the checker checked. Nothing here runs:
//! headers taken from the environment and the seal key are named, not read.

use std::time::Duration;

use ballast::PolicyBuilder;
use ballast_vocab::http::routes::{Routes, Unrouted};
use ballast_vocab::http::RetryOn;

/// The HTTP client of one system as its section declares it; see
/// [`Config::http_settings`](crate::Config::http_settings).
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
