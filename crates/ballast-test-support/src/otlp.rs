//! An OTLP/HTTP trace receiver: what a collector is to `ballast serve`.
//! It takes `POST /v1/traces` with protobuf bodies, decodes them with
//! `opentelemetry-proto`, and keeps every span with its resource, or, for
//! a benchmark, only counts them. A stalled one reads each export and never
//! answers, as a collector that hangs does.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

/// One exported span, with the resource and scope it came under.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The span as decoded.
    pub span: Span,
    /// The resource's attributes.
    pub resource: Vec<KeyValue>,
    /// The instrumentation scope's name.
    pub scope: String,
}

impl Exported {
    /// The span's name.
    pub fn name(&self) -> &str {
        &self.span.name
    }

    /// The trace id, in hex as `traceparent` writes it.
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }

    /// The span id, in hex.
    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }

    /// The parent's span id, in hex; empty for a root span.
    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }

    /// The span's kind.
    pub fn kind(&self) -> SpanKind {
        SpanKind::try_from(self.span.kind).unwrap_or(SpanKind::Unspecified)
    }

    /// The span ids the span links to, in hex.
    pub fn links(&self) -> Vec<String> {
        self.span.links.iter().map(|l| hex(&l.span_id)).collect()
    }

    /// An attribute's value as text (numbers and booleans written out).
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }

    /// An attribute's value if it is an integer (the conventions' type for
    /// status codes, ports and counts).
    pub fn int(&self, key: &str) -> Option<i64> {
        let value = self.span.attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
        match value.value {
            Some(any_value::Value::IntValue(i)) => Some(i),
            _ => None,
        }
    }

    /// A resource attribute's value as text.
    pub fn resource_attr(&self, key: &str) -> Option<String> {
        attr(&self.resource, key)
    }

    /// Every text the span carries: its name, every attribute (span,
    /// events, links, resource) as `key=value`, its status message.
    pub fn texts(&self) -> Vec<String> {
        let mut out = vec![self.span.name.clone()];
        let pairs = self
            .span
            .attributes
            .iter()
            .chain(self.span.events.iter().flat_map(|e| &e.attributes))
            .chain(self.span.links.iter().flat_map(|l| &l.attributes))
            .chain(&self.resource);
        out.extend(pairs.map(|kv| format!("{}={}", kv.key, kv.value.as_ref().map(text).unwrap_or_default())));
        out.extend(self.span.events.iter().map(|e| e.name.clone()));
        out.extend(self.span.status.as_ref().map(|s| s.message.clone()));
        out
    }
}

/// The spans as an indented tree, a line per span: name, kind, span id and
/// attributes, children under their parent (spans whose parent is not among
/// them are roots, shown under that parent's id). For a test to print what
/// it received.
pub fn tree(spans: &[Exported]) -> String {
    let ids: Vec<String> = spans.iter().map(Exported::span_id).collect();
    let mut out = String::new();
    let mut roots: Vec<&Exported> = spans.iter().filter(|s| !ids.contains(&s.parent_id())).collect();
    roots.sort_by_key(|s| s.span.start_time_unix_nano);
    for root in roots {
        out.push_str(&format!("parent {} (trace {})\n", or_none(&root.parent_id()), root.trace_id()));
        branch(spans, root, 1, &mut out);
    }
    out
}

fn or_none(id: &str) -> &str {
    if id.is_empty() {
        "none"
    } else {
        id
    }
}

fn branch(spans: &[Exported], span: &Exported, depth: usize, out: &mut String) {
    let kind = span.kind().as_str_name().trim_start_matches("SPAN_KIND_").to_lowercase();
    let attrs: Vec<String> = span
        .span
        .attributes
        .iter()
        .map(|kv| format!("{}={}", kv.key, kv.value.as_ref().map(text).unwrap_or_default()))
        .collect();
    let links = span.links();
    let linked = if links.is_empty() { String::new() } else { format!(" links=[{}]", links.join(",")) };
    out.push_str(&format!(
        "{}{} [{kind}] {}{linked} {{{}}}\n",
        "  ".repeat(depth),
        span.name(),
        span.span_id(),
        attrs.join(", ")
    ));
    let mut children: Vec<&Exported> = spans.iter().filter(|s| s.parent_id() == span.span_id()).collect();
    children.sort_by_key(|s| s.span.start_time_unix_nano);
    for child in children {
        branch(spans, child, depth + 1, out);
    }
}

fn attr(pairs: &[KeyValue], key: &str) -> Option<String> {
    pairs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).map(text)
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().map(text).collect::<Vec<_>>().join(","),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the receiver does with an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Keep,
    Count,
    Stall,
}

#[derive(Debug, Default)]
struct Received {
    spans: Mutex<Vec<Exported>>,
    exports: AtomicU64,
    counted: AtomicU64,
}

/// The receiver on a free loopback port; stops when dropped.
pub struct Collector {
    addr: SocketAddr,
    received: Arc<Received>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Collector {
    /// A receiver that keeps every span.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Collector {
        Self::with(Mode::Keep).await
    }

    /// A receiver that decodes and counts spans but keeps none (for
    /// benchmarks, whose exports would otherwise fill memory).
    pub async fn counting() -> Collector {
        Self::with(Mode::Count).await
    }

    /// A receiver that reads every export and never answers.
    pub async fn stalled() -> Collector {
        Self::with(Mode::Stall).await
    }

    async fn with(mode: Mode) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let received = Arc::new(Received::default());
        let shared = Arc::clone(&received);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared), mode));
            }
        });
        Collector { addr, received, accept }
    }

    /// The base URL to give as `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended to it).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span kept so far.
    pub fn spans(&self) -> Vec<Exported> {
        self.received.spans.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Exports received (requests to `/v1/traces`), answered or not.
    pub fn exports(&self) -> u64 {
        self.received.exports.load(Ordering::SeqCst)
    }

    /// Spans received, kept or only counted.
    pub fn span_count(&self) -> u64 {
        self.received.counted.load(Ordering::SeqCst)
    }
}

async fn serve(stream: tokio::net::TcpStream, received: Arc<Received>, mode: Mode) {
    let service = service_fn(move |request: http::Request<Incoming>| {
        let received = Arc::clone(&received);
        async move {
            let path_ok = request.uri().path() == "/v1/traces" && request.method() == http::Method::POST;
            let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            if !path_ok {
                return Ok::<_, std::convert::Infallible>(answer(404, "application/json"));
            }
            received.exports.fetch_add(1, Ordering::SeqCst);
            if mode == Mode::Stall {
                tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
            }
            let Ok(export) = ExportTraceServiceRequest::decode(body) else {
                return Ok(answer(400, "application/x-protobuf"));
            };
            let mut count = 0;
            let mut kept = Vec::new();
            for resource_spans in export.resource_spans {
                let resource = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
                for scope_spans in resource_spans.scope_spans {
                    let scope = scope_spans.scope.map(|s| s.name).unwrap_or_default();
                    for span in scope_spans.spans {
                        count += 1;
                        if mode == Mode::Keep {
                            kept.push(Exported { span, resource: resource.clone(), scope: scope.clone() });
                        }
                    }
                }
            }
            received.counted.fetch_add(count, Ordering::SeqCst);
            received.spans.lock().unwrap_or_else(PoisonError::into_inner).extend(kept);
            // An empty ExportTraceServiceResponse: everything accepted.
            Ok(answer(200, "application/x-protobuf"))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

fn answer(status: u16, content_type: &'static str) -> http::Response<Full<Bytes>> {
    let mut response = http::Response::new(Full::new(Bytes::new()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}
