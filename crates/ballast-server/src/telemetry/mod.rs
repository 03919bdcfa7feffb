//! What `ballast serve` tells the world about itself besides `/metrics`:
//! its log, one line per notable event on stderr, at `RUST_LOG` (default
//! `info`), and, when configured, its traces over OTLP/HTTP.
//!
//! The log records events only, never spans: the fmt layer would format
//! every span's fields into a string when the span is made, which on the
//! gateway's hot path costs more than the rest of a call's policy, for lines
//! nobody prints. Spans are made only when the trace exporter is on: then
//! the spans of ballast's own crates (the gateway's server span, the call,
//! each attempt, each delivery) go to OpenTelemetry through
//! `tracing-opentelemetry`, sampled as
//! [`SpanPipeline::sampler`](ballast_config::SpanPipeline::sampler) says,
//! and leave the process in batches on a thread of their own ([`export`]).
//! Trace context travels as W3C `traceparent` / `tracestate`.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use ballast_config::Config;
//!
//! let config = Config::load("ballast.toml")?;
//! let resolved = config.telemetry()?.resolve(|var| std::env::var(var).ok())?;
//! let telemetry = ballast_server::telemetry::init(resolved.export.as_ref())?;
//! // … serve …
//! telemetry.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

mod client;
pub mod export;

use std::time::Duration;

use ballast_config::{Root, TraceExport};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::resource::{Resource, TelemetryResourceDetector};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter as _};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::{filter_fn, EnvFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The crates whose spans are traced: ballast's own, at `debug` (every
/// attempt is a debug span), and nothing of the libraries beneath them.
const TRACED: [&str; 4] = ["ballast", "ballast_http", "ballast_queue", "ballast_server"];

/// Why the log or the exporter could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A global subscriber was installed before.
    #[error("a tracing subscriber is installed already")]
    AlreadyInstalled,
    /// The OTLP exporter refused its settings.
    #[error("the OTLP trace exporter to {endpoint} cannot be built: {source}")]
    Exporter {
        /// Where it would have exported.
        endpoint: String,
        /// What it refused.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The export thread could not start.
    #[error("the trace export thread cannot start: {0}")]
    Thread(#[source] std::io::Error),
}

/// The installed telemetry; [`shutdown`](Self::shutdown) exports what is
/// still queued before the process exits.
#[derive(Debug)]
#[must_use = "dropping it stops the trace exporter without exporting what is queued"]
pub struct Telemetry {
    traces: Option<(SdkTracerProvider, export::Running)>,
}

impl Telemetry {
    /// Where traces go, if they are exported.
    pub fn traces_endpoint(&self) -> Option<&str> {
        self.traces.as_ref().map(|(_, running)| running.endpoint())
    }

    /// Stops the exporter: spans still queued are exported for up to
    /// `deadline`, then whatever remains is dropped.
    pub async fn shutdown(self, deadline: Duration) {
        if let Some((provider, running)) = self.traces {
            // Ends the provider's part (no span is accepted after it); the
            // export thread then drains its queue.
            let _ = provider.shutdown();
            running.finish(deadline).await;
        }
    }
}

/// Installs `ballast serve`'s log and, with `traces`, its trace exporter as
/// the global subscriber, with W3C trace context as the propagator.
///
/// Install the Prometheus recorder first: the exporter's counters
/// (`ballast_trace_spans_exported_total`, `ballast_trace_spans_dropped_total`)
/// are taken here.
pub fn init(traces: Option<&TraceExport>) -> Result<Telemetry, InitError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter)
        .with_filter(filter_fn(|meta| meta.is_event()));
    let Some(settings) = traces else {
        tracing_subscriber::registry().with(log).try_init().map_err(|_| InitError::AlreadyInstalled)?;
        return Ok(Telemetry { traces: None });
    };
    let (provider, running) = tracer_provider(settings)?;
    let tracer = provider.tracer_with_scope(
        opentelemetry::InstrumentationScope::builder("ballast")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    );
    let traced = TRACED.iter().fold(Targets::new(), |t, target| t.with_target(*target, LevelFilter::DEBUG));
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Per-span attributes nobody asked for, each costing a field a span.
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        // ballast reads a span's context from the span itself, never from
        // `Context::current()`: activating it on every poll of an
        // instrumented future would cost a thread-local push and pop each.
        .with_context_activation(false)
        .with_filter(traced)
        .with_filter(filter_fn(|meta| meta.is_span()));
    if tracing_subscriber::registry().with(log).with(spans).try_init().is_err() {
        let _ = provider.shutdown();
        return Err(InitError::AlreadyInstalled);
    }
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    Ok(Telemetry { traces: Some((provider, running)) })
}

/// The provider that samples and hands ended spans to the export thread.
fn tracer_provider(settings: &TraceExport) -> Result<(SdkTracerProvider, export::Running), InitError> {
    let resource = resource(settings);
    let mut exporter = otlp_exporter(settings)?;
    exporter.set_resource(&resource);
    let (processor, running) = export::start(exporter, settings).map_err(InitError::Thread)?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(settings))
        .with_resource(resource)
        .build();
    Ok((provider, running))
}

/// OTLP over HTTP with protobuf bodies, through [`client::CollectorClient`].
fn otlp_exporter(settings: &TraceExport) -> Result<opentelemetry_otlp::SpanExporter, InitError> {
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client::CollectorClient::new(settings.spans.timeout))
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(settings.spans.timeout)
        .with_headers(settings.headers.iter().cloned().collect())
        .build()
        .map_err(|source| InitError::Exporter { endpoint: settings.endpoint.clone(), source })
}

/// The process as the traces name it: `service.name`, ballast's version, an
/// instance id of this process, the SDK's own attributes, then the
/// configured ones (which win).
fn resource(settings: &TraceExport) -> Resource {
    let instance: String = {
        let mut id = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut id);
        id.iter().map(|b| format!("{b:02x}")).collect()
    };
    let ours = [
        KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        KeyValue::new("service.instance.id", instance),
    ];
    let configured =
        settings.spans.resource_attributes.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(ours)
        .with_attributes(configured)
        .with_service_name(settings.spans.service_name.clone())
        .build()
}

fn sampler(settings: &TraceExport) -> Sampler {
    let root = match settings.spans.sampler.root {
        Root::AlwaysOn => Sampler::AlwaysOn,
        Root::AlwaysOff => Sampler::AlwaysOff,
        Root::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
    };
    if settings.spans.sampler.parent_based {
        Sampler::ParentBased(Box::new(root))
    } else {
        root
    }
}
