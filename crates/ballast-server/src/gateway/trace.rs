//! The gateway's server span: where a caller's trace enters `ballast
//! serve`. Its parent is the caller's span (`traceparent` / `tracestate`);
//! the call, its attempts and a deferred write's delivery are its
//! descendants. Attributes follow OpenTelemetry's HTTP server conventions,
//! plus `ballast.*`; no header value is recorded.
//!
//! Without the trace exporter the span is disabled, costs nothing, and a
//! caller's `traceparent` passes to the upstream untouched.

use axum::http::request::Parts;
use axum::http::HeaderName;
use axum::response::Response;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{ATTEMPTS, PROBLEM, ROUTE};

/// The span of one `/call/{system}/…` request, continuing the caller's trace.
pub(super) fn server_span(parts: &Parts, system: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "ballast.gateway",
        otel.kind = "server",
        otel.name = %format_args!("{} /call/{system}", parts.method),
        otel.status_code = tracing::field::Empty,
        http.request.method = %parts.method,
        http.route = "/call/{system}/{path}",
        url.path = parts.uri.path(),
        url.scheme = "http",
        ballast.system = system,
        ballast.attempts = tracing::field::Empty,
        ballast.problem = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&opentelemetry_http::HeaderExtractor(&parts.headers))
    });
    if parent.span().span_context().is_valid() {
        // Fails only for a span already started, which this one is not.
        let _ = span.set_parent(parent);
    }
    span
}

/// The answer, on the span: its status, the attempts, and why the gateway
/// answered itself when it did. A 5xx is an error of the server span
/// (a 4xx is the caller's, as the conventions say).
pub(super) fn record(span: &tracing::Span, system: &str, response: &Response) {
    let status = response.status();
    span.record("http.response.status_code", i64::from(status.as_u16()));
    let header = |name: &HeaderName| response.headers().get(name).and_then(|v| v.to_str().ok());
    // A declared route names the template the request matched.
    if let Some((_, template)) = header(&ROUTE).and_then(|route| route.split_once(' ')) {
        span.record("http.route", format!("/call/{system}{template}"));
    }
    if let Some(attempts) = header(&ATTEMPTS).and_then(|v| v.parse::<i64>().ok()) {
        span.record("ballast.attempts", attempts);
    }
    let problem = header(&PROBLEM);
    if let Some(reason) = problem {
        span.record("ballast.problem", reason);
    }
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
        match problem {
            Some(reason) => span.record("error.type", reason),
            None => span.record("error.type", status.as_str()),
        };
    }
}
