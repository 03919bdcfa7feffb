//! # ballast-config — declare each external system's policy in TOML, check it against the guide's rules
//!
//! One file describes every external system's resilience policy and the
//! durable queue. This crate loads it (keeping every key's location),
//! checks it against the Resilience Style Guide's rules — each finding names
//! its rule id, file, line and column — explains each policy's worst-case
//! timeline, and hands out what it declares — each system's policy, its HTTP
//! client's settings, the queue's settings — read from the very values it
//! checked, so a service runs exactly the configuration `ballast lint`
//! checked. Nothing here runs: `ballast-server`, the composition root,
//! builds the HTTP systems, the queue and its worker from these.
//!
//! ```
//! use ballast_config::{report, Config};
//!
//! let config = Config::parse("ballast.toml", r#"
//!     [systems.sber]
//!     base_url = "http://127.0.0.1:8080"
//!     dedupes_by_key = true
//!     key_ttl = "24h"
//!
//!     [systems.sber.retry]
//!     max_attempts = 8
//! "#).expect("valid TOML with known keys");
//!
//! let findings = config.lint();
//! assert!(findings.iter().any(|f| f.rule.map(|r| r.id()) == Some("R-RES-RE-3")));
//! println!("{}", report::human(&findings, Some(config.source())));
//!
//! // A system with lint errors is never built.
//! assert!(config.policy_builder("sber").is_err());
//! ```
//!
//! The rules the checker knows are listed below. The mapping to runtime objects is:
//! `backoff = "exponential"` → [`ballast::Backoff::exponential`] (and
//! `"exponential-full-jitter"`), `budget_ratio` → [`ballast::Budget::ratio`]
//! (0 or absent keeps the default budget), breaker `kind = "consecutive"`
//! uses `threshold` as the number of failures in a row, `"count"` uses
//! `threshold`, `size`, `min_calls`, `"sampling"` uses `threshold`,
//! `duration`, `min_throughput`. A system without `[retry]` makes one
//! attempt per call; a key left out takes the core's default
//! ([`ballast::Retry::DEFAULT_ATTEMPTS`], [`ballast::Backoff::DEFAULT_FIRST_DELAY`],
//! [`ballast::Backoff::DEFAULT_MAX_DELAY`], [`ballast::Timeout::DEFAULT_ATTEMPT`], …), and
//! `retry_on` names are the HTTP client's ([`ballast_vocab::http::RetryOn::names`]).
//!
//! # Rules
//!
//! | rule | severity | trigger |
//! |---|---|---|
//! | R-RES-RE-3 | error | `retry.max_attempts` > [`ballast::MAX_ATTEMPTS`] (5) or 0 |
//! | R-RES-RE-4 | error / warning | worst-case in-memory window ([`ballast::Timeline`]) > [`ballast::WINDOW_ERROR`] (30 s) / > [`ballast::WINDOW_WARNING`] (5 s) |
//! | R-RES-RE-X3 | error | `backoff` other than the two exponential kinds; `first_delay` under [`ballast::MIN_FIRST_DELAY`] (100 ms); `max_delay` under [`ballast::MIN_GROWTH`] (2) × `first_delay` |
//! | R-RES-RE-X2 | error | `retry_on` with "4xx", "all", "any", "*" or a 4xx status other than [`ballast_vocab::http::RetryOn::OPT_IN_NAMES`] ("408", "429") |
//! | R-RES-RE-X2 | note | `retry_on` of a deduplicating system without "409-in-flight": a 409 "still in flight" fails the write |
//! | R-RES-RE-X4 | error | `client.retries` > 0 |
//! | R-RES-CB-1 | error | `order` puts the breaker before (outside) retry |
//! | R-RES-RE-2 | error / note | `order` differs from retry → breaker → bulkhead → timeout / repeats it |
//! | R-RES-RE-1 | note | retry configured while `dedupes_by_key` is not true: writes never retried |
//! | R-RES-RE-1 | error | `key_ttl` shorter than the longest time a keyed write may be retried, durable queue included |
//! | R-RES-RE-1 | warning | `dedupes_by_key = true` without `key_ttl` |
//! | (none) | error | `timeout.connect` or `timeout.read` longer than the attempt timeout |
//! | (none) | error | `base_url` that `ballast serve` cannot use (parsed by the HTTP client's own parser) |
//! | (none) | error | `[telemetry]` values that cannot export traces (an endpoint that is not an http(s) URL or carries credentials, a protocol other than `http/protobuf`, an unknown sampler, a ratio outside 0..=1) |
//! | (none) | error | `[serve]` values out of range (`listen` not an address, `max_connections` 0, zero timeouts) |
//! | (none) | error | unknown keys (with "did you mean"), wrong types, out-of-range values; a file over 1 MiB |

// One module per TOML section — its keys, its rules and its settings
// together: `queue`, `serve`, `gateway` (with what both listeners share in
// `listener`), `alerts`, `telemetry`, `systems`.
mod alerts;
mod config;
mod error;
mod explain;
mod finding;
mod gateway;
mod lint;
mod listener;
mod load;
mod periodic;
mod queue;
mod schema;
mod serve;
mod settings;
mod source;
mod systems;
mod telemetry;

pub mod duration;
pub mod model;
pub mod openapi;
pub mod report;
pub mod size;
pub mod suggest;

pub use alerts::{AlertFormat, WebhookSettings, ALERT_FORMATS};
pub use ballast_vocab::queue::DurableSchedule;
pub use config::Config;
pub use duration::{ConfigDuration, DurationError};
pub use error::ConfigError;
pub use explain::{Durable, DurableStep, Explanation, SystemExplanation};
pub use finding::Finding;
pub use gateway::GatewaySettings;
pub use lint::has_errors;
pub use listener::{ListenerSettings, DEFAULT_BODY_READ_TIMEOUT};
pub use load::{Checked, LoadError, MAX_CONFIG_BYTES};
pub use periodic::{PeriodicSection, PeriodicSettings};
pub use queue::QueueSettings;
pub use serve::{ServeSettings, DEFAULT_DRAIN_DELAY, DEFAULT_DRAIN_TIMEOUT, DEFAULT_SESSION_TTL};
pub use size::{ConfigSize, SizeError};
pub use source::{Location, Source};
pub use systems::connection::{AuthSection, ConnectionSettings, OAuthSettings, ProxySetting, TlsSection};
pub use systems::http::HttpSettings;
pub use systems::rules::ORDER;
pub use systems::translate::{BACKOFF_KINDS, BREAKER_KINDS, MAX_COUNT_WINDOW, STRATEGIES};
pub use telemetry::{
    ResolvedTelemetry, Root, Sampler, SpanPipeline, TelemetryError, TelemetrySettings, TraceExport,
    DEFAULT_BATCH_SIZE, DEFAULT_EXPORT_TIMEOUT, DEFAULT_QUEUE_SIZE, DEFAULT_SCHEDULE_DELAY,
    DEFAULT_SERVICE_NAME, SAMPLERS,
};

/// The README's example, compiled and run as a doc test so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
