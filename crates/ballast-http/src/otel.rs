//! W3C trace context across attempts and the durable hand-over (feature
//! `otel`).
//!
//! Propagation goes through OpenTelemetry's global text-map propagator, so
//! the service decides the format by installing one (usually
//! `opentelemetry_sdk::propagation::TraceContextPropagator`, which writes
//! `traceparent` and `tracestate`); spans reach OpenTelemetry through
//! `tracing-opentelemetry`'s layer. Without either, nothing is added.
//!
//! - Every attempt's request carries the context of the attempt's span (or,
//!   when that span is filtered out, of the span around the call).
//! - A keyed write deferred by [`HttpSystem::write_or_defer`](crate::HttpSystem::write_or_defer)
//!   stores the deferring span's context among the [`Delivery`](crate::Delivery)'s
//!   headers; the worker's `ballast.delivery` span continues that trace
//!   (and links to the deferring span), so the request that deferred a
//!   payment and the delivery hours later share one trace id.

use http::{HeaderMap, HeaderName, HeaderValue};
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}

/// Stored headers, as name/value pairs in order.
struct Pairs<'a>(&'a mut Vec<(String, String)>);

impl Injector for Pairs<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.retain(|(name, _)| !name.eq_ignore_ascii_case(key));
        self.0.push((key.to_owned(), value));
    }
}

struct PairsRef<'a>(&'a [(String, String)]);

impl Extractor for PairsRef<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(name, _)| name.eq_ignore_ascii_case(key)).map(|(_, value)| value.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(name, _)| name.as_str()).collect()
    }
}

/// The OpenTelemetry context of `span`, or of the current span when `span`
/// is disabled; `None` when neither belongs to a valid trace.
fn context_of(span: &tracing::Span) -> Option<Context> {
    let span = if span.is_disabled() { tracing::Span::current() } else { span.clone() };
    let cx = span.context();
    cx.span().span_context().is_valid().then_some(cx)
}

/// The headers that carry `span`'s trace context, if it belongs to a trace.
pub(crate) fn trace_headers(span: &tracing::Span) -> Option<HeaderMap> {
    let cx = context_of(span)?;
    let mut headers = HeaderMap::new();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(&mut headers))
    });
    Some(headers)
}

/// Stores the current span's trace context among a deferred write's headers.
pub(crate) fn store(headers: &mut Vec<(String, String)>) {
    if let Some(cx) = context_of(&tracing::Span::current()) {
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Pairs(headers)));
    }
}

/// Makes `span` continue the trace stored in a delivery's headers, if any,
/// as a child of the span that deferred the write and linked to it (a
/// delivery may come hours later; the link says which request it finishes
/// even where a trace view cuts the trace into pieces).
pub(crate) fn continue_trace(span: &tracing::Span, headers: &[(String, String)]) {
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&PairsRef(headers)));
    let deferring = cx.span().span_context().clone();
    if deferring.is_valid() {
        // Fails only for a span that is disabled or already started elsewhere.
        if span.set_parent(cx).is_ok() {
            span.add_link(deferring);
        }
    }
}
