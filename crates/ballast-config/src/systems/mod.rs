//! `[systems.NAME]`: one external system — its keys and sub-sections
//! (`retry`, `breaker`, `bulkhead`, `rate_limit`, `timeout`, `routes`,
//! `headers`, `client`, and how it is reached: `tls`, `proxy`, `http2`,
//! `auth` in [`connection`]), their [`rules`], the core objects they
//! [`translate`] to, the system's [`policy`] and its HTTP client's
//! [settings](http).

pub(crate) mod connection;
pub(crate) mod http;
mod routes;
pub(crate) mod rules;
pub(crate) mod translate;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::schema::Part;
use crate::schema::Schema::{self, Named, Table, Value};

/// `[systems.NAME]`: one external system and its policy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct System {
    /// `base_url`: where the system lives (`http://` or `https://`).
    pub base_url: Option<String>,
    /// `critical`: whether the system's unavailability makes
    /// `/health/systems` answer 503 (the gateway's own readiness never
    /// depends on a system).
    pub critical: Option<bool>,
    /// `callback`: where to `POST` when a deferred write to the system ends,
    /// for a request without its own `Ballast-Callback`; a host of
    /// `[gateway] callback_hosts`.
    pub callback: Option<String>,
    /// `dedupes_by_key`: the system's contract guarantees deduplication by the
    /// idempotency key, so keyed writes may be retried (R-RES-RE-1).
    pub dedupes_by_key: Option<bool>,
    /// `key_ttl`: how long the system remembers a key.
    pub key_ttl: Option<ConfigDuration>,
    /// `idempotency_header`: the header carrying the key (default `Idempotency-Key`).
    pub idempotency_header: Option<String>,
    /// `order`: refused whenever it differs from the fixed order (R-RES-CB-1,
    /// R-RES-RE-2); it exists only to explain that the order is not a setting.
    pub order: Option<Vec<String>>,
    /// `[systems.NAME.retry]`; without it the guide's retry
    /// ([`ballast::guide::retry`]: 3 attempts); `retry = "none"`: one attempt per call.
    pub retry: Option<Part<RetrySection>>,
    /// `[systems.NAME.breaker]`; without it the guide's breaker
    /// ([`ballast::guide::breaker`]); `breaker = "none"`: no circuit breaker.
    pub breaker: Option<Part<BreakerSection>>,
    /// `[systems.NAME.bulkhead]`; without it the guide's bulkhead
    /// ([`ballast::guide::bulkhead`]); `bulkhead = "none"`: no concurrency limit.
    pub bulkhead: Option<Part<BulkheadSection>>,
    /// `[systems.NAME.rate_limit]`: at most so many attempts a second
    /// (none unless configured).
    pub rate_limit: Option<RateLimitSection>,
    /// `[systems.NAME.routes]`: `"METHOD /path/{param}/*" = "read" |
    /// "keyed_write" | "write_once"`, or `{ kind = …, timeout = "2s",
    /// method_override = true, sequence = "customer/{id}" }`.
    pub routes: Option<BTreeMap<String, RouteValue>>,
    /// `unrouted`: what becomes of a write no route matches — `"refuse"`
    /// (unsent, 400 `unrouted`: the default when routes are declared),
    /// `"once"` (sent once, never retried) or `"by_method"` (what its method
    /// and key make it: the default without routes).
    pub unrouted: Option<String>,
    /// `path_case`: whether routes match paths `"sensitive"` to the case of
    /// their letters (the default, as most systems route) or
    /// `"insensitive"` (a system whose routing ignores case).
    pub path_case: Option<String>,
    /// `[systems.NAME.timeout]`; without it [`ballast::Timeout::default`]
    /// (5 s per attempt, aggressive).
    pub timeout: Option<TimeoutSection>,
    /// `[systems.NAME.client]`: the HTTP client's own settings.
    pub client: Option<ClientSection>,
    /// `[systems.NAME.headers]`: headers added to every request to the
    /// system, each from an environment variable
    /// (`Authorization = { env = "PAY_TOKEN" }`), read when `ballast serve`
    /// starts and never stored with a deferred write.
    pub headers: Option<BTreeMap<String, HeaderSource>>,
    /// `[systems.NAME.tls]`: the roots, CA file and client certificate of
    /// its TLS.
    pub tls: Option<connection::TlsSection>,
    /// `proxy`: `"http://host:port"` (CONNECT for `https`), or `"none"`;
    /// without it `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` decide.
    pub proxy: Option<String>,
    /// `proxy_auth_env`: the variable holding `user:password` for `proxy`.
    pub proxy_auth_env: Option<String>,
    /// `http2`: `"auto"` (HTTP/2 when the server offers it by ALPN, the
    /// default) or `"never"`.
    pub http2: Option<String>,
    /// `[systems.NAME.auth]`: an OAuth 2.0 client credentials grant whose
    /// token every request carries.
    pub auth: Option<connection::AuthSection>,
}

/// One route of `[systems.NAME.routes]`: its kind, or a table with its
/// kind and its own attempt timeout.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RouteValue {
    /// `"keyed_write"`.
    Kind(String),
    /// `{ kind = "read", timeout = "2s" }`.
    Table {
        /// `kind`: `read`, `keyed_write` or `write_once`.
        kind: Option<String>,
        /// `timeout`: the route's attempt timeout, at most the system's.
        timeout: Option<ConfigDuration>,
        /// `method_override`: a request may reach this route through an
        /// `X-HTTP-Method-Override` (or `X-HTTP-Method`, `X-Method-Override`)
        /// header naming its method, which is then kept (default false:
        /// such headers are dropped).
        method_override: Option<bool>,
        /// `sequence`: the sequence a write through the route belongs to,
        /// `{param}`s of its template filled from the path
        /// (`"customer/{id}"`): such writes are applied in the order they
        /// were accepted.
        sequence: Option<String>,
        /// `follow`: a `202 Accepted` with a `Location` is followed to the
        /// operation's end by the worker (see [`FollowSection`]).
        follow: Option<FollowSection>,
    },
}

/// `follow` of a route: how the operation a `202 Accepted` started is
/// followed (`follow = {}` for the defaults).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct FollowSection {
    /// `field`: the JSON field of the status answer that says the
    /// operation ended (`status`, or dotted: `operation.status`); without
    /// it, any status other than 202 ends it.
    pub field: Option<String>,
    /// `done`: the field's final values (`["succeeded", "failed"]`).
    pub done: Option<Vec<String>>,
    /// `deadline`: how long it is followed before the task fails and
    /// alerts (default 1h).
    pub deadline: Option<ConfigDuration>,
}

impl RouteValue {
    /// The kind, as written.
    pub fn kind(&self) -> Option<&str> {
        match self {
            RouteValue::Kind(kind) => Some(kind),
            RouteValue::Table { kind, .. } => kind.as_deref(),
        }
    }

    /// The route's own attempt timeout.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        match self {
            RouteValue::Kind(_) => None,
            RouteValue::Table { timeout, .. } => timeout.map(|t| t.get()),
        }
    }

    /// The route's sequence template.
    pub fn sequence(&self) -> Option<&str> {
        match self {
            RouteValue::Kind(_) => None,
            RouteValue::Table { sequence, .. } => sequence.as_deref(),
        }
    }

    /// How an accepted write is followed, if it is.
    pub fn follow(&self) -> Option<&FollowSection> {
        match self {
            RouteValue::Kind(_) => None,
            RouteValue::Table { follow, .. } => follow.as_ref(),
        }
    }

    /// Whether a method-override header may reach the route.
    pub fn method_override(&self) -> bool {
        matches!(self, RouteValue::Table { method_override: Some(true), .. })
    }
}

/// Where a `[systems.NAME.headers]` value comes from.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct HeaderSource {
    /// `env`: the environment variable holding the value.
    pub env: Option<String>,
}

/// `[systems.NAME.retry]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RetrySection {
    /// `max_attempts`: counts the first attempt; 1..=[`ballast::MAX_ATTEMPTS`]
    /// (R-RES-RE-3). Default [`ballast::Retry::DEFAULT_ATTEMPTS`] (3).
    pub max_attempts: Option<u64>,
    /// `backoff`: `"exponential"` (default) or `"exponential-full-jitter"` (R-RES-RE-X3).
    pub backoff: Option<String>,
    /// `first_delay`: the median first delay (default
    /// [`ballast::Backoff::DEFAULT_FIRST_DELAY`], 500 ms).
    pub first_delay: Option<ConfigDuration>,
    /// `max_delay`: the cap on every delay (default [`ballast::Backoff::DEFAULT_MAX_DELAY`], 30 s).
    pub max_delay: Option<ConfigDuration>,
    /// `retry_on`: the transient outcomes retried (R-RES-RE-X2), by the names
    /// of [`ballast_vocab::http::RetryOn::names`]; default [`ballast_vocab::http::RetryOn::DEFAULT_NAMES`].
    pub retry_on: Option<Vec<String>>,
    /// `budget_ratio`: retries may add this share of recent calls; 0 or
    /// absent keeps the default budget ([`ballast::Budget::default`], 10 %).
    pub budget_ratio: Option<f64>,
}

/// `[systems.NAME.breaker]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct BreakerSection {
    /// `kind`: `"consecutive"`, `"count"` or `"sampling"`.
    pub kind: Option<String>,
    /// `threshold`: for `count` and `sampling` the share of failures that
    /// opens the breaker, in (0, 1]; for `consecutive` the number of failures
    /// in a row.
    pub threshold: Option<f64>,
    /// `size` (`count`): how many recent calls are counted.
    pub size: Option<u64>,
    /// `min_calls` (`count`): calls needed before it may open (default `size`).
    pub min_calls: Option<u64>,
    /// `duration` (`sampling`): the period sampled.
    pub duration: Option<ConfigDuration>,
    /// `min_throughput` (`sampling`): calls in the period needed before it may
    /// open (default [`ballast::Breaker::DEFAULT_MIN_THROUGHPUT`], 20).
    pub min_throughput: Option<u64>,
    /// `half_open_after`: wait before a probe (default [`ballast::Breaker::DEFAULT_HALF_OPEN`], 30 s).
    pub half_open_after: Option<ConfigDuration>,
    /// `scope`: `"replica"` (each `ballast serve` keeps its own breaker, the
    /// default) or `"fleet"` (the replicas on one PostgreSQL queue hold it
    /// together: it opens on every replica once `quorum` see the system
    /// failing, and one replica at a time probes).
    pub scope: Option<String>,
    /// `quorum` (`scope = "fleet"`): replicas that must see the system
    /// failing before it opens for the fleet (default 2).
    pub quorum: Option<u64>,
}

/// `[systems.NAME.bulkhead]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct BulkheadSection {
    /// `limit`: concurrent attempts.
    pub limit: Option<u64>,
    /// `queue`: attempts that may wait for a slot (default 0).
    pub queue: Option<u64>,
    /// `reserve_live`: the share of `limit` (0.0–1.0, default 0.25) kept
    /// for live calls while the durable queue's deliveries wait for slots.
    pub reserve_live: Option<f64>,
}

/// `[systems.NAME.rate_limit]` (see [`ballast::RateLimit`]).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RateLimitSection {
    /// `rate`: permits per period, `"100/s"`, `"30/m"` (also `min`), `"1000/h"`.
    pub rate: Option<String>,
    /// `burst`: attempts that may go at once (default: the permits of one period).
    pub burst: Option<u64>,
    /// `wait`: how long an attempt may wait for a permit (default 0: refused at once).
    pub wait: Option<ConfigDuration>,
    /// `adaptive`: lower the rate on 429 / `Retry-After` and follow the
    /// system's `RateLimit` headers (default false).
    pub adaptive: Option<bool>,
    /// `max_hold`: the longest an adaptive limit holds every attempt on the
    /// system's word (`Retry-After`, a quota spent until its reset); default
    /// 10 minutes, and never longer than the system's `key_ttl`.
    pub max_hold: Option<ConfigDuration>,
    /// `scope`: `"replica"` (each `ballast serve` holds the rate on its own:
    /// N replicas send N times it; the default) or `"fleet"` (the replicas on
    /// one PostgreSQL queue hold it together).
    pub scope: Option<String>,
}

/// `[systems.NAME.timeout]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TimeoutSection {
    /// `attempt`: per-attempt timeout (default [`ballast::Timeout::DEFAULT_ATTEMPT`], 5 s).
    pub attempt: Option<ConfigDuration>,
    /// `strategy`: `"aggressive"` (default) or `"cooperative"`.
    pub strategy: Option<String>,
    /// `total`: deadline for the whole call, attempts and waits together.
    pub total: Option<ConfigDuration>,
    /// `connect`: TCP/TLS connect timeout of the HTTP client.
    pub connect: Option<ConfigDuration>,
    /// `read`: read timeout of the HTTP client (between bytes of the response).
    pub read: Option<ConfigDuration>,
    /// `stream`: how long a streamed answer may take, all of it, once its
    /// head came (default 5 minutes); it holds a bulkhead slot till then.
    pub stream: Option<ConfigDuration>,
}

/// `[systems.NAME.client]`: the HTTP client's own settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ClientSection {
    /// `retries`: client-level retries; anything but 0 breaks R-RES-RE-X4.
    pub retries: Option<u64>,
}

pub(crate) const KEYS: &[(&str, Schema)] = &[
    ("base_url", Value),
    ("critical", Value),
    ("callback", Value),
    ("dedupes_by_key", Value),
    ("key_ttl", Value),
    ("idempotency_header", Value),
    ("order", Value),
    (
        "retry",
        Table(&[
            ("max_attempts", Value),
            ("backoff", Value),
            ("first_delay", Value),
            ("max_delay", Value),
            ("retry_on", Value),
            ("budget_ratio", Value),
        ]),
    ),
    (
        "breaker",
        Table(&[
            ("kind", Value),
            ("threshold", Value),
            ("size", Value),
            ("min_calls", Value),
            ("duration", Value),
            ("min_throughput", Value),
            ("half_open_after", Value),
            ("scope", Value),
            ("quorum", Value),
        ]),
    ),
    ("bulkhead", Table(&[("limit", Value), ("queue", Value), ("reserve_live", Value)])),
    (
        "rate_limit",
        Table(&[
            ("rate", Value),
            ("burst", Value),
            ("wait", Value),
            ("adaptive", Value),
            ("max_hold", Value),
            ("scope", Value),
        ]),
    ),
    (
        "routes",
        Named(&[
            ("kind", Value),
            ("timeout", Value),
            ("method_override", Value),
            ("sequence", Value),
            ("follow", Table(&[("field", Value), ("done", Value), ("deadline", Value)])),
        ]),
    ),
    ("unrouted", Value),
    ("path_case", Value),
    (
        "timeout",
        Table(&[
            ("attempt", Value),
            ("strategy", Value),
            ("total", Value),
            ("connect", Value),
            ("read", Value),
            ("stream", Value),
        ]),
    ),
    ("client", Table(&[("retries", Value)])),
    ("headers", Named(&[("env", Value)])),
    connection::KEYS[0],
    connection::KEYS[1],
    connection::KEYS[2],
    connection::KEYS[3],
    connection::KEYS[4],
];
