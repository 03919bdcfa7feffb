//! The TOML model: what a `ballast.toml` may say, key by key.
//!
//! The key names are public — users' files depend on them. Every value is
//! optional here so that a missing key becomes a finding that names it
//! (and where it should go) instead of a bare deserialization error. Which
//! keys exist is also listed in a schema at the end of this module, so the
//! loader can refuse unknown keys with a "did you mean" suggestion.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::size::ConfigSize;

/// A whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct File {
    /// `[queue]`: the durable task queue that takes over keyed writes.
    pub queue: Option<QueueSection>,
    /// `[serve]`: how `ballast serve` listens.
    pub serve: Option<ServeSection>,
    /// `[gateway]`: the outbound gateway of `ballast serve`; absent, no gateway.
    pub gateway: Option<GatewaySection>,
    /// `[alerts]`: where a task that failed for good is reported (R-RES-RE-5).
    pub alerts: Option<AlertsSection>,
    /// `[telemetry]`: where `ballast serve` exports its traces (OTLP/HTTP);
    /// the `OTEL_*` variables win over it.
    pub telemetry: Option<TelemetrySection>,
    /// `[systems.NAME]`: one entry per external system.
    #[serde(default)]
    pub systems: BTreeMap<String, System>,
}

/// `[queue]`: the durable task queue (R-RES-RE-5).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct QueueSection {
    /// `url`: `sqlite://file.db` or `postgres://…`.
    pub url: Option<String>,
    /// `poll_interval`: how often workers look for due tasks (default
    /// [`ballast_vocab::queue::DEFAULT_POLL_INTERVAL`], 5 s).
    pub poll_interval: Option<ConfigDuration>,
    /// `lease`: how long a claimed task stays with its worker without a
    /// heartbeat; after a crash, its tasks run again this long after the
    /// last heartbeat (default [`ballast_vocab::queue::DEFAULT_LEASE`], 30 s).
    pub lease: Option<ConfigDuration>,
    /// `max_attempts`: durable attempts before the task fails and a human is
    /// alerted (default [`ballast_vocab::queue::DEFAULT_MAX_ATTEMPTS`], 10).
    pub max_attempts: Option<u64>,
    /// `max_age`: how long after its first attempt a deferred write whose
    /// system declares no `key_ttl` may still be sent; attempts refused
    /// unsent (breaker open, bulkhead full) are postponed without counting
    /// against `max_attempts` until then (default
    /// [`ballast_vocab::queue::DEFAULT_MAX_AGE`], 24 h).
    pub max_age: Option<ConfigDuration>,
    /// `seal_key_env`: the environment variable holding the key (32 bytes,
    /// as 64 hex digits or base64) that seals credential headers of
    /// deferred writes before they are stored (ChaCha20-Poly1305). Without
    /// it, deferring a request that carries one is refused unsent.
    pub seal_key_env: Option<String>,
    /// `seal_headers`: header names sealed besides `Authorization`,
    /// `Proxy-Authorization`, `Cookie` and `X-Api-Key`.
    pub seal_headers: Option<Vec<String>>,
    /// `retain_completed`: how long `ballast serve` keeps completed and
    /// cancelled tasks before pruning them (default 7 days).
    pub retain_completed: Option<ConfigDuration>,
    /// `retain_failed`: how long it keeps failed tasks (default 30 days).
    pub retain_failed: Option<ConfigDuration>,
}

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
}

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
}

/// `[alerts]`: the sinks every task that fails for good is reported to
/// (R-RES-RE-5: "a human is alerted"), besides the log.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AlertsSection {
    /// `[[alerts.webhook]]`: HTTP endpoints that receive each alert.
    pub webhook: Option<Vec<WebhookSection>>,
}

/// `[[alerts.webhook]]`: one HTTP endpoint alerts are posted to.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct WebhookSection {
    /// `url_env`: the environment variable holding the endpoint's URL
    /// (webhook URLs carry secrets; the file names only the variable).
    pub url_env: Option<String>,
    /// `format`: `"json"` (ballast's own document), `"slack"` (an incoming
    /// webhook's `text`) or `"alertmanager"` (the body of Alertmanager's
    /// `POST /api/v2/alerts`).
    pub format: Option<String>,
    /// `dedupes_by_key`: whether the endpoint deduplicates posts by their
    /// `Idempotency-Key`, so a post may be retried (R-RES-RE-1). Default:
    /// true for `alertmanager` (an alert is identified by its labels), false
    /// otherwise.
    pub dedupes_by_key: Option<bool>,
    /// `timeout`: how long one post may take (default 5 s).
    pub timeout: Option<ConfigDuration>,
}

/// `[telemetry]`: the OTLP/HTTP trace exporter of `ballast serve`. Every
/// key has a standard variable that wins over it
/// ([`TelemetrySettings::resolve`](crate::TelemetrySettings::resolve)).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct TelemetrySection {
    /// `endpoint`: the collector's OTLP/HTTP base URL; traces go to
    /// `{endpoint}/v1/traces` (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub endpoint: Option<String>,
    /// `traces_endpoint`: the full URL traces are posted to
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
    pub traces_endpoint: Option<String>,
    /// `protocol`: `"http/protobuf"`, the only one (`OTEL_EXPORTER_OTLP_PROTOCOL`).
    pub protocol: Option<String>,
    /// `[telemetry.headers]`: headers sent to the collector, each from an
    /// environment variable (`x-api-key = { env = "COLLECTOR_KEY" }`;
    /// `OTEL_EXPORTER_OTLP_HEADERS`).
    pub headers: Option<BTreeMap<String, HeaderSource>>,
    /// `timeout`: how long one export may take (default 10 s;
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`).
    pub timeout: Option<ConfigDuration>,
    /// `service_name`: the resource's `service.name` (default `"ballast"`;
    /// `OTEL_SERVICE_NAME`).
    pub service_name: Option<String>,
    /// `[telemetry.resource_attributes]`: further resource attributes
    /// (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource_attributes: Option<BTreeMap<String, String>>,
    /// `sampler`: one of [`SAMPLERS`](crate::SAMPLERS) (default
    /// `"parentbased_always_on"`; `OTEL_TRACES_SAMPLER`).
    pub sampler: Option<String>,
    /// `sampler_arg`: the ratio of the `traceidratio` samplers
    /// (`OTEL_TRACES_SAMPLER_ARG`).
    pub sampler_arg: Option<f64>,
    /// `queue_size`: ended spans held for export at most; more are dropped
    /// and counted in `ballast_trace_spans_dropped_total` (default 2048;
    /// `OTEL_BSP_MAX_QUEUE_SIZE`).
    pub queue_size: Option<u64>,
    /// `batch_size`: spans per export at most (default 512;
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    pub batch_size: Option<u64>,
    /// `schedule_delay`: how long a span waits for its batch to fill
    /// (default 5 s; `OTEL_BSP_SCHEDULE_DELAY`).
    pub schedule_delay: Option<ConfigDuration>,
}

/// `[systems.NAME]`: one external system and its policy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct System {
    /// `base_url`: where the system lives (`http://` or `https://`).
    pub base_url: Option<String>,
    /// `critical`: whether the system's breaker state feeds readiness.
    pub critical: Option<bool>,
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
    /// method_override = true }`.
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
    },
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

/// A part of the composition as a file gives it: its own table, or
/// `"none"` to leave the part out on purpose. A part the file does not
/// mention at all is the guide's ([`ballast::guide`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Part<T> {
    /// `retry = "none"` (or `breaker`, `bulkhead`): left out on purpose.
    Off,
    /// A table of settings.
    On(T),
}

impl<T> Part<T> {
    /// The table, if the part is configured with one.
    pub fn section(&self) -> Option<&T> {
        match self {
            Part::On(t) => Some(t),
            Part::Off => None,
        }
    }
}

/// The word that leaves a part out.
pub const NONE: &str = "none";

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Part<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Part<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of settings, or the string \"none\" to leave this part out")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Part<T>, E> {
                if value == NONE {
                    Ok(Part::Off)
                } else {
                    Err(E::invalid_value(serde::de::Unexpected::Str(value), &self))
                }
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Part<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Part::On)
            }
        }
        deserializer.deserialize_any(Visit(std::marker::PhantomData))
    }
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
}

/// `[systems.NAME.client]`: the HTTP client's own settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ClientSection {
    /// `retries`: client-level retries; anything but 0 breaks R-RES-RE-X4.
    pub retries: Option<u64>,
}

/// Where a key may appear: the keys of each section, for refusing unknown
/// keys with a suggestion. Kept next to the structs so the two change together.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Schema {
    /// A table with these keys, each with its own schema.
    Table(&'static [(&'static str, Schema)]),
    /// A table whose keys are names chosen by the user (`[systems.NAME]`).
    Named(&'static [(&'static str, Schema)]),
    /// An array of tables with these keys (`[[alerts.webhook]]`).
    Tables(&'static [(&'static str, Schema)]),
    /// A plain value.
    Value,
}

use Schema::{Named, Table, Tables, Value};

pub(crate) const ROOT: Schema = Table(&[
    ("queue", Table(QUEUE_KEYS)),
    ("serve", Table(SERVE_KEYS)),
    ("gateway", Table(GATEWAY_KEYS)),
    ("alerts", Table(&[("webhook", Tables(WEBHOOK_KEYS))])),
    ("telemetry", Table(TELEMETRY_KEYS)),
    ("systems", Named(SYSTEM_KEYS)),
]);

const TELEMETRY_KEYS: &[(&str, Schema)] = &[
    ("endpoint", Value),
    ("traces_endpoint", Value),
    ("protocol", Value),
    ("headers", Named(&[("env", Value)])),
    ("timeout", Value),
    ("service_name", Value),
    ("resource_attributes", Value),
    ("sampler", Value),
    ("sampler_arg", Value),
    ("queue_size", Value),
    ("batch_size", Value),
    ("schedule_delay", Value),
];

const WEBHOOK_KEYS: &[(&str, Schema)] =
    &[("url_env", Value), ("format", Value), ("dedupes_by_key", Value), ("timeout", Value)];

const GATEWAY_KEYS: &[(&str, Schema)] = &[
    ("listen", Value),
    ("max_body", Value),
    ("token_env", Value),
    ("max_connections", Value),
    ("header_read_timeout", Value),
    ("body_read_timeout", Value),
    ("trust_forwarded", Value),
    ("allowed_hosts", Value),
];

const SERVE_KEYS: &[(&str, Schema)] = &[
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
];

const QUEUE_KEYS: &[(&str, Schema)] = &[
    ("url", Value),
    ("poll_interval", Value),
    ("lease", Value),
    ("max_attempts", Value),
    ("max_age", Value),
    ("seal_key_env", Value),
    ("seal_headers", Value),
    ("retain_completed", Value),
    ("retain_failed", Value),
];

const SYSTEM_KEYS: &[(&str, Schema)] = &[
    ("base_url", Value),
    ("critical", Value),
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
    ("bulkhead", Table(&[("limit", Value), ("queue", Value)])),
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
    ("routes", Named(&[("kind", Value), ("timeout", Value), ("method_override", Value)])),
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
        ]),
    ),
    ("client", Table(&[("retries", Value)])),
    ("headers", Named(&[("env", Value)])),
];
