//! The rules of `[telemetry]`: values that cannot export traces are
//! refused with what to write instead.

use super::env::check_endpoint;
use super::*;
use crate::duration::display;
use crate::finding::KeyFinding;
use crate::suggest::did_you_mean;

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
            Some(var) if crate::alerts::is_env_name(var) => {}
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
