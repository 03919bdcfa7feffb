//! Where `ballast serve` sends its traces: `[telemetry]` in the file, the
//! OpenTelemetry SDK's standard variables (`OTEL_*`) over it.
//!
//! The variables win, as the OpenTelemetry specification says: a platform
//! that sets `OTEL_EXPORTER_OTLP_ENDPOINT` for every process on a host gets
//! ballast's traces where it gets every other service's. Nothing configured
//! — no `[telemetry]` endpoint, no `OTEL_EXPORTER_OTLP_*ENDPOINT`, no
//! `OTEL_TRACES_EXPORTER=otlp` — means no exporter at all.
//!
//! A variable whose value cannot be used is ignored with a warning (the
//! specification's rule for the SDKs); one that asks for something this
//! build cannot do (OTLP over gRPC) is refused, so traces are never lost
//! without a word.
//!
//! The section's keys and settings are here; reading the variables over
//! them is [`env`]'s, and the section's rules [`rules`]'s.

mod env;
mod rules;

pub(crate) use rules::rules;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::duration::ConfigDuration;
use crate::schema::Schema::{self, Named, Value};
use crate::systems::HeaderSource;
pub(crate) use env::with_traces_path;

/// How the root of a trace is sampled, and whether a caller's decision is
/// followed (`parentbased_*`, the default: a request that arrives with a
/// sampled `traceparent` is traced, one that arrives unsampled is not).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// Whether a parent's decision decides (`parentbased_*`).
    pub parent_based: bool,
    /// The decision for a trace that starts here.
    pub root: Root,
}

/// The sampling decision for a trace that starts at `ballast serve`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// This share of traces, by trace id (0.0..=1.0).
    Ratio(f64),
}

/// The sampler names of `OTEL_TRACES_SAMPLER` and `[telemetry] sampler`.
pub const SAMPLERS: [&str; 6] = [
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
    "always_on",
    "always_off",
    "traceidratio",
];

impl Sampler {
    /// `parentbased_always_on`, the specification's default.
    pub const DEFAULT: Sampler = Sampler { parent_based: true, root: Root::AlwaysOn };

    /// The sampler `name` with `arg` (the ratio of the `traceidratio` kinds,
    /// 1.0 without one); `None` for a name that is not one of [`SAMPLERS`].
    pub fn named(name: &str, arg: Option<f64>) -> Option<Sampler> {
        let (parent_based, root) = match name.strip_prefix("parentbased_") {
            Some(root) => (true, root),
            None => (false, name),
        };
        let root = match root {
            "always_on" => Root::AlwaysOn,
            "always_off" => Root::AlwaysOff,
            "traceidratio" => Root::Ratio(arg.unwrap_or(1.0)),
            _ => return None,
        };
        Some(Sampler { parent_based, root })
    }
}

impl std::fmt::Display for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = if self.parent_based { "parentbased_" } else { "" };
        match self.root {
            Root::AlwaysOn => write!(f, "{prefix}always_on"),
            Root::AlwaysOff => write!(f, "{prefix}always_off"),
            Root::Ratio(r) => write!(f, "{prefix}traceidratio {r}"),
        }
    }
}

/// `[telemetry]` as the file gives it, with the defaults of what it leaves
/// out; [`resolve`](Self::resolve) puts the `OTEL_*` variables over it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetrySettings {
    /// The URL spans are posted to: `traces_endpoint`, else `endpoint` +
    /// `/v1/traces`.
    pub traces_endpoint: Option<String>,
    /// Headers sent to the collector, each with the variable holding its
    /// value (collectors' API keys are secrets: the file names only the
    /// variable).
    pub headers: Vec<(String, String)>,
    /// What the spans carry and how they are batched.
    pub spans: SpanPipeline,
}

/// What a trace exporter needs, the file and the variables merged: the
/// input of `ballast_server::telemetry`.
#[derive(Clone, PartialEq)]
pub struct TraceExport {
    /// The URL spans are posted to (OTLP/HTTP, protobuf).
    pub endpoint: String,
    /// Headers sent to the collector, values included.
    pub headers: Vec<(String, String)>,
    /// What the spans carry and how they are batched.
    pub spans: SpanPipeline,
}

/// What the spans carry and how they are batched on their way out: the
/// part of the settings the file gives and the exporter takes alike
/// ([`TelemetrySettings::spans`], [`TraceExport::spans`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanPipeline {
    /// How long one export may take.
    pub timeout: Duration,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Further resource attributes, `service.name` not among them.
    pub resource_attributes: Vec<(String, String)>,
    /// How traces are sampled.
    pub sampler: Sampler,
    /// Ended spans waiting to be exported at most; more are dropped and counted.
    pub queue_size: usize,
    /// Spans in one export at most.
    pub batch_size: usize,
    /// How long a span waits for its batch to fill before it is sent anyway.
    pub schedule_delay: Duration,
}

impl std::fmt::Debug for TraceExport {
    /// Header values are secrets (a collector's API key): names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TraceExport")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("spans", &self.spans)
            .finish()
    }
}

/// The merge of the file and the variables: the exporter to run, if any,
/// and what was ignored on the way (to be logged).
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedTelemetry {
    /// The exporter, `None` when nothing asks for one.
    pub export: Option<TraceExport>,
    /// One line per variable that was ignored, naming it and why.
    pub warnings: Vec<String>,
}

/// Why the traces cannot be exported as configured.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TelemetryError {
    /// A `[telemetry.headers]` value's variable is not set.
    #[error(
        "[telemetry.headers] {header} comes from {var}, which is not set (or empty): export it before `ballast \
         serve` starts"
    )]
    HeaderEnvUnset {
        /// The header.
        header: String,
        /// The variable.
        var: String,
    },
    /// OTLP over gRPC (or JSON) was asked for.
    #[error(
        "{var}={value:?}: ballast serve exports OTLP over HTTP with protobuf only; point it at the collector's \
         OTLP/HTTP receiver (port 4318) and set {var}=http/protobuf"
    )]
    Protocol {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// An endpoint variable is not an `http://` or `https://` URL.
    #[error("{var}={value:?} is not an http:// or https:// URL of the collector ({reason})")]
    Endpoint {
        /// The variable.
        var: &'static str,
        /// Its value, its secrets masked ([`ballast::redact_url`]): a refused
        /// URL may carry a password or a token.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The OTLP/HTTP path of traces, appended to a base `endpoint`.
const TRACES_PATH: &str = "v1/traces";

/// The collector an `OTEL_TRACES_EXPORTER=otlp` alone sends to.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How long one export may take unless told otherwise (the specification's 10 s).
pub const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Ended spans held for export at most unless told otherwise (the specification's 2048).
pub const DEFAULT_QUEUE_SIZE: usize = 2048;

/// Spans per export at most unless told otherwise (the specification's 512).
pub const DEFAULT_BATCH_SIZE: usize = 512;

/// How long a span waits for its batch unless told otherwise (the specification's 5 s).
pub const DEFAULT_SCHEDULE_DELAY: Duration = Duration::from_secs(5);

/// The service name of the resource unless told otherwise.
pub const DEFAULT_SERVICE_NAME: &str = "ballast";

/// The largest export queue accepted: each waiting span holds its attributes.
const MAX_QUEUE_SIZE: u64 = 1 << 20;

impl Default for SpanPipeline {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_EXPORT_TIMEOUT,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            resource_attributes: Vec::new(),
            sampler: Sampler::DEFAULT,
            queue_size: DEFAULT_QUEUE_SIZE,
            batch_size: DEFAULT_BATCH_SIZE,
            schedule_delay: DEFAULT_SCHEDULE_DELAY,
        }
    }
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

pub(crate) const KEYS: &[(&str, Schema)] = &[
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
