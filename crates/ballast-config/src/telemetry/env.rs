//! The OpenTelemetry SDK's standard variables (`OTEL_*`) read over the
//! file's `[telemetry]`: unusable values ignored with a warning, what this
//! build cannot do refused.

use std::time::Duration;

use super::*;

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
        let mut resource_attributes = self.spans.resource_attributes.clone();
        let mut service_name = self.spans.service_name.clone();
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
            .unwrap_or(self.spans.timeout);
        let sampler = self.sampler_from(&mut env);
        let queue_size = env.count("OTEL_BSP_MAX_QUEUE_SIZE").unwrap_or(self.spans.queue_size);
        let mut batch_size = env.count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").unwrap_or(self.spans.batch_size);
        if batch_size > queue_size {
            // The specification: a batch is never larger than the queue.
            batch_size = queue_size;
        }
        let schedule_delay = env.millis(&["OTEL_BSP_SCHEDULE_DELAY"]).unwrap_or(self.spans.schedule_delay);
        let spans = SpanPipeline {
            timeout,
            service_name,
            resource_attributes,
            sampler,
            queue_size,
            batch_size,
            schedule_delay: schedule_delay.max(Duration::from_millis(1)),
        };
        let export = TraceExport { endpoint, headers, spans };
        Ok(ResolvedTelemetry { export: Some(export), warnings: env.warnings })
    }

    fn sampler_from<F: Fn(&str) -> Option<String>>(&self, env: &mut Env<F>) -> Sampler {
        let arg = env.parsed("OTEL_TRACES_SAMPLER_ARG", "a ratio from 0 to 1", |t| {
            t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r))
        });
        let Some(name) = env.get("OTEL_TRACES_SAMPLER") else {
            // An argument alone changes the file's ratio, if it has one.
            return match (self.spans.sampler.root, arg) {
                (Root::Ratio(_), Some(r)) => Sampler { root: Root::Ratio(r), ..self.spans.sampler },
                _ => self.spans.sampler,
            };
        };
        match Sampler::named(&name.to_ascii_lowercase(), arg) {
            Some(sampler) => sampler,
            None => {
                env.warnings.push(format!(
                    "OTEL_TRACES_SAMPLER={name:?} ignored: this build samples with {}; the file's {} stays",
                    SAMPLERS.join(", "),
                    self.spans.sampler
                ));
                self.spans.sampler
            }
        }
    }
}

/// `base` with the traces path appended, as the specification builds a
/// signal's URL from `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub(crate) fn with_traces_path(base: &str) -> String {
    format!("{}/{TRACES_PATH}", base.trim_end_matches('/'))
}

/// Why `url` cannot be a collector's endpoint, if it cannot.
pub(super) fn check_endpoint(url: &str) -> Result<(), &'static str> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TelemetrySettings {
        TelemetrySettings {
            traces_endpoint: Some("http://file-collector:4318/v1/traces".into()),
            headers: vec![("x-api-key".into(), "COLLECTOR_KEY".into())],
            spans: SpanPipeline {
                resource_attributes: vec![("deployment.environment".into(), "staging".into())],
                ..SpanPipeline::default()
            },
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
        assert_eq!(export.spans.service_name, "payments-gateway");
        assert_eq!(
            export.spans.resource_attributes,
            [("deployment.environment".into(), "prod".into()), ("host.name".into(), "a,b".into())]
        );
        assert_eq!(export.spans.sampler, Sampler { parent_based: true, root: Root::Ratio(0.01) });
        assert_eq!(export.spans.timeout, Duration::from_millis(2500));
        assert_eq!(
            (export.spans.queue_size, export.spans.batch_size),
            (100, 100),
            "a batch never outgrows the queue"
        );
        assert_eq!(export.spans.schedule_delay, Duration::from_millis(200));
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
        assert_eq!(export.spans.service_name, "ballast");
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
        assert_eq!(export.spans.sampler, Sampler::DEFAULT);
        assert_eq!(export.spans.queue_size, DEFAULT_QUEUE_SIZE);
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
