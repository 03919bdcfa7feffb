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

use std::time::Duration;

use crate::config::Config;
use crate::duration::display;
use crate::finding::KeyFinding;
use crate::model::TelemetrySection;
use crate::suggest::did_you_mean;

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
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// The URL spans are posted to: `traces_endpoint`, else `endpoint` +
    /// `/v1/traces`.
    pub traces_endpoint: Option<String>,
    /// Headers sent to the collector, each with the variable holding its
    /// value (collectors' API keys are secrets: the file names only the
    /// variable).
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// `service.name` of the resource.
    pub service_name: String,
    /// Further resource attributes.
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

/// What a trace exporter needs, the file and the variables merged: the
/// input of `ballast_server::telemetry`.
#[derive(Clone, PartialEq)]
pub struct TraceExport {
    /// The URL spans are posted to (OTLP/HTTP, protobuf).
    pub endpoint: String,
    /// Headers sent to the collector, values included.
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// `service.name`.
    pub service_name: String,
    /// Further resource attributes, `service.name` not among them.
    pub resource_attributes: Vec<(String, String)>,
    /// How traces are sampled.
    pub sampler: Sampler,
    /// Ended spans waiting to be exported at most.
    pub queue_size: usize,
    /// Spans in one export at most.
    pub batch_size: usize,
    /// How long a span waits for its batch to fill.
    pub schedule_delay: Duration,
}

impl std::fmt::Debug for TraceExport {
    /// Header values are secrets (a collector's API key): names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TraceExport")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .field("resource_attributes", &self.resource_attributes)
            .field("sampler", &self.sampler)
            .field("queue_size", &self.queue_size)
            .field("batch_size", &self.batch_size)
            .field("schedule_delay", &self.schedule_delay)
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

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            traces_endpoint: None,
            headers: Vec::new(),
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

impl Config {
    /// `[telemetry]` over [`TelemetrySettings::default`]. Refused when the
    /// section has lint errors.
    ///
    /// ```
    /// use ballast_config::Config;
    ///
    /// let config = Config::parse("inline.toml", r#"
    ///     [telemetry]
    ///     endpoint = "http://otel-collector:4318"
    ///     sampler = "parentbased_traceidratio"
    ///     sampler_arg = 0.25
    /// "#).unwrap();
    /// let file = config.telemetry().unwrap();
    /// assert_eq!(file.traces_endpoint.as_deref(), Some("http://otel-collector:4318/v1/traces"));
    ///
    /// // The standard variables win over the file.
    /// let env = |var: &str| (var == "OTEL_TRACES_SAMPLER_ARG").then(|| "0.01".to_owned());
    /// let export = file.resolve(env).unwrap().export.unwrap();
    /// assert_eq!(export.sampler.to_string(), "parentbased_traceidratio 0.01");
    /// ```
    pub fn telemetry(&self) -> Result<TelemetrySettings, crate::ConfigError> {
        let defaults = TelemetrySettings::default();
        let Some(t) = &self.file.telemetry else { return Ok(defaults) };
        self.refuse("telemetry", rules(t))?;
        let traces_endpoint = match (&t.traces_endpoint, &t.endpoint) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(base)) => Some(with_traces_path(base)),
            (None, None) => None,
        };
        let sampler = t.sampler.as_deref().and_then(|name| Sampler::named(name, t.sampler_arg));
        Ok(TelemetrySettings {
            traces_endpoint,
            headers: t
                .headers
                .iter()
                .flatten()
                .map(|(name, source)| (name.clone(), source.env.clone().unwrap_or_default()))
                .collect(),
            timeout: t.timeout.map_or(defaults.timeout, |d| d.get()),
            service_name: t.service_name.clone().unwrap_or(defaults.service_name),
            resource_attributes: t
                .resource_attributes
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            sampler: sampler.unwrap_or(defaults.sampler),
            queue_size: t.queue_size.map_or(defaults.queue_size, |n| n as usize),
            batch_size: t.batch_size.map_or(defaults.batch_size, |n| n as usize),
            schedule_delay: t.schedule_delay.map_or(defaults.schedule_delay, |d| d.get()),
        })
    }
}

/// One variable, read through the caller's lookup (the process environment
/// in `ballast serve`, a map in tests); empty counts as unset, as the
/// specification says.
struct Env<F> {
    lookup: F,
    warnings: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    fn get(&self, var: &str) -> Option<String> {
        (self.lookup)(var).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// The first of `vars` that is set.
    fn first(&self, vars: &[&'static str]) -> Option<(&'static str, String)> {
        vars.iter().find_map(|var| Some((*var, self.get(var)?)))
    }

    /// A value the variable holds as `parse` reads it; ignored with a
    /// warning when it does not parse.
    fn parsed<T>(&mut self, var: &'static str, what: &str, parse: impl Fn(&str) -> Option<T>) -> Option<T> {
        let text = self.get(var)?;
        let value = parse(&text);
        if value.is_none() {
            self.warnings.push(format!("{var}={text:?} ignored: it is not {what}"));
        }
        value
    }

    fn millis(&mut self, vars: &[&'static str]) -> Option<Duration> {
        let (var, _) = self.first(vars)?;
        self.parsed(var, "a number of milliseconds", |t| t.parse::<u64>().ok().map(Duration::from_millis))
    }

    fn count(&mut self, var: &'static str) -> Option<usize> {
        self.parsed(var, "a positive whole number", |t| t.parse::<usize>().ok().filter(|n| *n > 0))
    }
}

impl TelemetrySettings {
    /// The file's settings with the standard variables over them, `lookup`
    /// reading a variable (`|var| std::env::var(var).ok()` in `ballast serve`).
    ///
    /// | variable | over |
    /// |---|---|
    /// | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no exporter at all |
    /// | `OTEL_TRACES_EXPORTER=otlp` | an exporter even without an endpoint (`http://localhost:4318`) |
    /// | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is), `OTEL_EXPORTER_OTLP_ENDPOINT` (+ `/v1/traces`) | `traces_endpoint`, `endpoint` |
    /// | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `protocol` (`http/protobuf` only) |
    /// | `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, `OTEL_EXPORTER_OTLP_HEADERS` (`k=v,k2=v2`) | `[telemetry.headers]`, per header |
    /// | `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` (ms) | `timeout` |
    /// | `OTEL_SERVICE_NAME`, then `service.name` in `OTEL_RESOURCE_ATTRIBUTES` | `service_name` |
    /// | `OTEL_RESOURCE_ATTRIBUTES` (`k=v,k2=v2`) | `[telemetry.resource_attributes]`, per key |
    /// | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `sampler`, `sampler_arg` |
    /// | `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, `OTEL_BSP_SCHEDULE_DELAY` (ms), `OTEL_BSP_EXPORT_TIMEOUT` (ms) | `queue_size`, `batch_size`, `schedule_delay`, `timeout` |
    ///
    /// The values of `[telemetry.headers]` are read from their variables here.
    pub fn resolve(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ResolvedTelemetry, TelemetryError> {
        let mut env = Env { lookup, warnings: Vec::new() };
        let disabled =
            env.parsed("OTEL_SDK_DISABLED", "true or false", |t| match t.to_ascii_lowercase().as_str() {
                "true" => Some(true),
                "false" => Some(false),
                _ => None,
            });
        let exporter = env.get("OTEL_TRACES_EXPORTER").map(|v| v.to_ascii_lowercase());
        let wants_otlp = match exporter.as_deref() {
            None => false,
            Some("none") => return Ok(ResolvedTelemetry { export: None, warnings: env.warnings }),
            Some("otlp") => true,
            Some(other) => {
                env.warnings.push(format!(
                    "OTEL_TRACES_EXPORTER={other:?} ignored: ballast serve exports traces over OTLP only (\"otlp\" or \"none\")"
                ));
                false
            }
        };
        if disabled == Some(true) {
            return Ok(ResolvedTelemetry { export: None, warnings: env.warnings });
        }
        let endpoint = match env.first(&["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
        {
            Some((var, url)) => {
                check_endpoint(&url).map_err(|reason| TelemetryError::Endpoint {
                    var,
                    value: ballast::redact_url(&url),
                    reason,
                })?;
                Some(if var == "OTEL_EXPORTER_OTLP_ENDPOINT" { with_traces_path(&url) } else { url })
            }
            None => self.traces_endpoint.clone(),
        };
        let Some(endpoint) = endpoint.or_else(|| wants_otlp.then(|| with_traces_path(DEFAULT_ENDPOINT)))
        else {
            return Ok(ResolvedTelemetry { export: None, warnings: env.warnings });
        };
        if let Some((var, value)) =
            env.first(&["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"])
        {
            if value != "http/protobuf" {
                return Err(TelemetryError::Protocol { var, value });
            }
        }
        let mut headers = Vec::new();
        for (name, var) in &self.headers {
            let value = env
                .get(var)
                .ok_or_else(|| TelemetryError::HeaderEnvUnset { header: name.clone(), var: var.clone() })?;
            headers.push((name.clone(), value));
        }
        if let Some((var, list)) =
            env.first(&["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"])
        {
            match pairs(&list) {
                Some(pairs) => merge(&mut headers, pairs, |a, b| a.eq_ignore_ascii_case(b)),
                // The value is a secret: the warning names the variable only.
                None => env.warnings.push(format!("{var} ignored: it is not a list of key=value pairs")),
            }
        }
        let mut resource_attributes = self.resource_attributes.clone();
        let mut service_name = self.service_name.clone();
        if let Some(list) = env.get("OTEL_RESOURCE_ATTRIBUTES") {
            match pairs(&list) {
                Some(pairs) => merge(&mut resource_attributes, pairs, |a, b| a == b),
                None => env.warnings.push(format!(
                    "OTEL_RESOURCE_ATTRIBUTES={list:?} ignored: it is not a list of key=value pairs"
                )),
            }
        }
        if let Some(i) = resource_attributes.iter().position(|(k, _)| k == "service.name") {
            service_name = resource_attributes.remove(i).1;
        }
        if let Some(name) = env.get("OTEL_SERVICE_NAME") {
            service_name = name;
        }
        let timeout = env
            .millis(&[
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
                "OTEL_EXPORTER_OTLP_TIMEOUT",
                "OTEL_BSP_EXPORT_TIMEOUT",
            ])
            .filter(|t| !t.is_zero())
            .unwrap_or(self.timeout);
        let sampler = self.sampler_from(&mut env);
        let queue_size = env.count("OTEL_BSP_MAX_QUEUE_SIZE").unwrap_or(self.queue_size);
        let mut batch_size = env.count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").unwrap_or(self.batch_size);
        if batch_size > queue_size {
            // The specification: a batch is never larger than the queue.
            batch_size = queue_size;
        }
        let schedule_delay = env.millis(&["OTEL_BSP_SCHEDULE_DELAY"]).unwrap_or(self.schedule_delay);
        let export = TraceExport {
            endpoint,
            headers,
            timeout,
            service_name,
            resource_attributes,
            sampler,
            queue_size,
            batch_size,
            schedule_delay: schedule_delay.max(Duration::from_millis(1)),
        };
        Ok(ResolvedTelemetry { export: Some(export), warnings: env.warnings })
    }

    fn sampler_from<F: Fn(&str) -> Option<String>>(&self, env: &mut Env<F>) -> Sampler {
        let arg = env.parsed("OTEL_TRACES_SAMPLER_ARG", "a ratio from 0 to 1", |t| {
            t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r))
        });
        let Some(name) = env.get("OTEL_TRACES_SAMPLER") else {
            // An argument alone changes the file's ratio, if it has one.
            return match (self.sampler.root, arg) {
                (Root::Ratio(_), Some(r)) => Sampler { root: Root::Ratio(r), ..self.sampler },
                _ => self.sampler,
            };
        };
        match Sampler::named(&name.to_ascii_lowercase(), arg) {
            Some(sampler) => sampler,
            None => {
                env.warnings.push(format!(
                    "OTEL_TRACES_SAMPLER={name:?} ignored: this build samples with {}; the file's {} stays",
                    SAMPLERS.join(", "),
                    self.sampler
                ));
                self.sampler
            }
        }
    }
}

/// `base` with the traces path appended, as the specification builds a
/// signal's URL from `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn with_traces_path(base: &str) -> String {
    format!("{}/{TRACES_PATH}", base.trim_end_matches('/'))
}

/// Why `url` cannot be a collector's endpoint, if it cannot.
fn check_endpoint(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("the scheme must be http or https")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("it has no host");
    }
    if authority.contains('@') {
        return Err("credentials belong in a header from the environment, not in the URL");
    }
    if url.parse::<http::Uri>().is_err() {
        return Err("it does not parse as a URL");
    }
    Ok(())
}

/// `k=v,k2=v2` with percent-encoded values (the W3C baggage format the
/// specification uses for `OTEL_RESOURCE_ATTRIBUTES` and the headers);
/// `None` when an entry has no `=` or an empty key.
fn pairs(list: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (key, value) = entry.split_once('=')?;
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8().ok()?;
        out.push((key.to_owned(), value.into_owned()));
    }
    Some(out)
}

/// `over` put over `base`, key by key.
fn merge(base: &mut Vec<(String, String)>, over: Vec<(String, String)>, same: impl Fn(&str, &str) -> bool) {
    for (key, value) in over {
        base.retain(|(k, _)| !same(k, &key));
        base.push((key, value));
    }
}

/// The `[telemetry]` section's values.
pub(crate) fn rules(t: &TelemetrySection) -> Vec<KeyFinding> {
    let at = |key: &str| vec!["telemetry".to_owned(), key.to_owned()];
    let mut out = Vec::new();
    for key in ["endpoint", "traces_endpoint"] {
        let value = if key == "endpoint" { &t.endpoint } else { &t.traces_endpoint };
        if let Some(url) = value {
            if let Err(reason) = check_endpoint(url) {
                out.push(KeyFinding::error(
                    None,
                    at(key),
                    format!("`{key}` {url:?} is not a collector's URL: {reason}"),
                    "use the collector's OTLP/HTTP address, e.g. \"http://otel-collector:4318\"",
                ));
            }
        }
    }
    match t.protocol.as_deref() {
        None | Some("http/protobuf") => {}
        Some(other) => out.push(KeyFinding::error(
            None,
            at("protocol"),
            format!("protocol {other:?} is not supported: traces are exported over OTLP/HTTP with protobuf"),
            "use `protocol = \"http/protobuf\"` and the collector's OTLP/HTTP port (4318)",
        )),
    }
    match t.sampler.as_deref() {
        Some(name) if Sampler::named(name, None).is_none() => {
            let help = match did_you_mean(name, SAMPLERS) {
                Some(s) => format!("did you mean \"{s}\"?"),
                None => format!("use one of {}", SAMPLERS.join(", ")),
            };
            out.push(KeyFinding::error(
                None,
                at("sampler"),
                format!("sampler {name:?} does not exist"),
                help,
            ));
        }
        _ => {}
    }
    if let Some(arg) = t.sampler_arg {
        let ratio_sampler = t.sampler.as_deref().is_some_and(|s| s.ends_with("traceidratio"));
        if !(0.0..=1.0).contains(&arg) {
            out.push(KeyFinding::error(
                None,
                at("sampler_arg"),
                format!("`sampler_arg` {arg} is not a ratio from 0 to 1"),
                "write the share of traces to keep, e.g. 0.1 for one in ten",
            ));
        } else if !ratio_sampler {
            out.push(KeyFinding::error(
                None,
                at("sampler_arg"),
                "`sampler_arg` is a ratio, but the sampler is not a traceidratio one".into(),
                "add `sampler = \"parentbased_traceidratio\"`, or drop `sampler_arg`",
            ));
        }
    }
    if t.resource_attributes.iter().flatten().any(|(k, _)| k == "service.name") {
        out.push(KeyFinding::error(
            None,
            vec!["telemetry".to_owned(), "resource_attributes".to_owned(), "service.name".to_owned()],
            "`service.name` is set by `service_name`, not among the resource attributes".into(),
            "write `service_name = \"...\"` in [telemetry]",
        ));
    }
    for (name, source) in t.headers.iter().flatten() {
        let path = vec!["telemetry".to_owned(), "headers".to_owned(), name.clone()];
        if !ballast_vocab::http::is_header_name(name) {
            out.push(KeyFinding::error(
                None,
                path.clone(),
                format!("{name:?} is not an HTTP header name"),
                "use a header name such as \"x-api-key\"",
            ));
        }
        match source.env.as_deref() {
            Some(var) if crate::rules::is_env_name(var) => {}
            _ => out.push(KeyFinding::error(
                None,
                path,
                format!("header {name} names no environment variable"),
                "write `{ env = \"VAR\" }`: a collector's API key is a secret and stays out of the file",
            )),
        }
    }
    for (key, n, max) in
        [("queue_size", t.queue_size, MAX_QUEUE_SIZE), ("batch_size", t.batch_size, MAX_QUEUE_SIZE)]
    {
        if n.is_some_and(|n| n == 0 || n > max) {
            out.push(KeyFinding::error(
                None,
                at(key),
                format!("`{key}` is outside 1..={max}"),
                format!(
                    "leave it out for the default ({})",
                    if key == "queue_size" { DEFAULT_QUEUE_SIZE } else { DEFAULT_BATCH_SIZE }
                ),
            ));
        }
    }
    if let (Some(batch), Some(queue)) = (t.batch_size, t.queue_size) {
        if batch > queue {
            out.push(KeyFinding::error(
                None,
                at("batch_size"),
                format!("`batch_size` {batch} is larger than `queue_size` {queue}: no batch could fill"),
                "keep batch_size at most queue_size",
            ));
        }
    }
    for (key, d) in [("timeout", t.timeout), ("schedule_delay", t.schedule_delay)] {
        if d.is_some_and(|d| d.get().is_zero()) {
            out.push(KeyFinding::error(
                None,
                at(key),
                format!("`{key}` is zero"),
                format!(
                    "leave it out for the default ({})",
                    display(if key == "timeout" { DEFAULT_EXPORT_TIMEOUT } else { DEFAULT_SCHEDULE_DELAY })
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TelemetrySettings {
        TelemetrySettings {
            traces_endpoint: Some("http://file-collector:4318/v1/traces".into()),
            headers: vec![("x-api-key".into(), "COLLECTOR_KEY".into())],
            resource_attributes: vec![("deployment.environment".into(), "staging".into())],
            ..TelemetrySettings::default()
        }
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |var| vars.iter().find(|(k, _)| *k == var).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn nothing_configured_means_no_exporter() {
        let resolved = TelemetrySettings::default().resolve(env(&[])).unwrap();
        assert_eq!(resolved.export, None);
        let resolved =
            settings().resolve(env(&[("COLLECTOR_KEY", "k"), ("OTEL_SDK_DISABLED", "true")])).unwrap();
        assert_eq!(resolved.export, None);
        let resolved = settings().resolve(env(&[("OTEL_TRACES_EXPORTER", "none")])).unwrap();
        assert_eq!(resolved.export, None);
    }

    #[test]
    fn the_variables_win_over_the_file() {
        let vars = [
            ("COLLECTOR_KEY", "file-secret"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env-collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=env%20secret,x-tenant=ops"),
            ("OTEL_SERVICE_NAME", "payments-gateway"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=ignored,host.name=a%2Cb"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.01"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"),
            ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ];
        let resolved = settings().resolve(env(&vars)).unwrap();
        assert_eq!(resolved.warnings, Vec::<String>::new());
        let export = resolved.export.unwrap();
        assert_eq!(export.endpoint, "http://env-collector:4318/v1/traces");
        assert_eq!(
            export.headers,
            [("x-api-key".into(), "env secret".into()), ("x-tenant".into(), "ops".into())]
        );
        assert_eq!(export.service_name, "payments-gateway");
        assert_eq!(
            export.resource_attributes,
            [("deployment.environment".into(), "prod".into()), ("host.name".into(), "a,b".into())]
        );
        assert_eq!(export.sampler, Sampler { parent_based: true, root: Root::Ratio(0.01) });
        assert_eq!(export.timeout, Duration::from_millis(2500));
        assert_eq!((export.queue_size, export.batch_size), (100, 100), "a batch never outgrows the queue");
        assert_eq!(export.schedule_delay, Duration::from_millis(200));
        assert!(!format!("{export:?}").contains("secret"), "{export:?}");

        let signal =
            [("COLLECTOR_KEY", "k"), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://c:4318/custom")];
        assert_eq!(
            settings().resolve(env(&signal)).unwrap().export.unwrap().endpoint,
            "https://c:4318/custom"
        );
        let only_exporter = [("OTEL_TRACES_EXPORTER", "otlp")];
        let export = TelemetrySettings::default().resolve(env(&only_exporter)).unwrap().export.unwrap();
        assert_eq!(export.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(export.service_name, "ballast");
    }

    #[test]
    fn unusable_variables_are_ignored_with_a_warning_and_impossible_ones_refused() {
        let vars = [
            ("COLLECTOR_KEY", "k"),
            ("OTEL_TRACES_SAMPLER", "xray"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "not a pair"),
        ];
        let resolved = settings().resolve(env(&vars)).unwrap();
        let export = resolved.export.unwrap();
        assert_eq!(export.sampler, Sampler::DEFAULT);
        assert_eq!(export.queue_size, DEFAULT_QUEUE_SIZE);
        assert_eq!(resolved.warnings.len(), 4, "{:?}", resolved.warnings);
        assert!(resolved.warnings.iter().any(|w| w.starts_with("OTEL_TRACES_SAMPLER=\"xray\" ignored")));

        let grpc = [("COLLECTOR_KEY", "k"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        let err = settings().resolve(env(&grpc)).unwrap_err();
        assert!(err.to_string().contains("OTLP/HTTP receiver (port 4318)"), "{err}");
        let unset = settings().resolve(env(&[])).unwrap_err();
        assert_eq!(
            unset,
            TelemetryError::HeaderEnvUnset { header: "x-api-key".into(), var: "COLLECTOR_KEY".into() }
        );
        let userinfo =
            [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:pw-secret@collector:4318/?token=tk-secret")];
        let err = TelemetrySettings::default().resolve(env(&userinfo)).unwrap_err();
        assert!(matches!(err, TelemetryError::Endpoint { .. }), "{err}");
        let said = err.to_string();
        assert!(!said.contains("pw-secret") && !said.contains("tk-secret"), "N11: printed redacted: {said}");
    }
}
