//! Ended spans leave the process without ever holding up a call: the span
//! processor only offers each span to a bounded queue (a span that finds it
//! full is dropped and counted), and a thread of its own takes batches off
//! the queue and exports them, each export bounded by the timeout.
//!
//! A collector that is down or slow fills the queue; calls go on at their
//! own pace and `ballast_trace_spans_dropped_total{reason="queue_full"}`
//! says how much was lost. The SDK's `BatchSpanProcessor` has the same shape
//! but counts its drops only in a log line at shutdown.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `ballast_trace_spans_exported_total` | | spans the collector accepted |
//! | `ballast_trace_spans_dropped_total` | `reason`: `queue_full`, `export_failed`, `shutdown` | spans lost, and where |

use std::time::Duration;

use ballast_config::TraceExport;
use metrics::Counter;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Spans the collector accepted.
pub const EXPORTED: &str = "ballast_trace_spans_exported_total";

/// Spans lost, by `reason`.
pub const DROPPED: &str = "ballast_trace_spans_dropped_total";

/// The counters of one exporter, taken once.
#[derive(Debug, Clone)]
struct Counters {
    exported: Counter,
    queue_full: Counter,
    export_failed: Counter,
    shutdown: Counter,
}

impl Counters {
    fn register() -> Self {
        metrics::describe_counter!(EXPORTED, "Spans exported to the OTLP collector");
        metrics::describe_counter!(DROPPED, "Spans dropped before reaching the collector, by reason");
        Self {
            exported: metrics::counter!(EXPORTED),
            queue_full: metrics::counter!(DROPPED, "reason" => "queue_full"),
            export_failed: metrics::counter!(DROPPED, "reason" => "export_failed"),
            shutdown: metrics::counter!(DROPPED, "reason" => "shutdown"),
        }
    }
}

/// The span processor: offers each sampled span to the export queue.
#[derive(Debug)]
pub struct Offer {
    spans: mpsc::Sender<SpanData>,
    stop: CancellationToken,
    counters: Counters,
}

impl SpanProcessor for Offer {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.counters.queue_full.increment(1),
            Err(mpsc::error::TrySendError::Closed(_)) => self.counters.shutdown.increment(1),
        }
    }

    /// Nothing to wait for here: the export thread sends what it has on its
    /// own schedule, and [`Running::finish`] drains it at the end.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.stop.cancel();
        Ok(())
    }
}

/// The export thread, running; [`finish`](Self::finish) stops it.
#[derive(Debug)]
pub struct Running {
    endpoint: String,
    stop: CancellationToken,
    done: oneshot::Receiver<()>,
}

impl Running {
    /// Where the spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops taking spans and exports what is queued, for up to `deadline`.
    pub async fn finish(self, deadline: Duration) {
        self.stop.cancel();
        if tokio::time::timeout(deadline, self.done).await.is_err() {
            tracing::warn!(
                endpoint = %self.endpoint,
                "trace export did not finish within {deadline:?}; the spans still queued are lost"
            );
        }
    }
}

/// Starts the export thread for `exporter` with the queue and batch sizes of
/// `settings`; the processor to give the tracer provider, and the handle.
pub fn start<E>(exporter: E, settings: &TraceExport) -> std::io::Result<(Offer, Running)>
where
    E: SpanExporter + 'static,
{
    let (spans, queue) = mpsc::channel(settings.spans.queue_size.max(1));
    let stop = CancellationToken::new();
    let counters = Counters::register();
    let (done_tx, done) = oneshot::channel();
    let batcher = Batcher {
        queue,
        exporter,
        batch_size: settings.spans.batch_size.max(1),
        delay: settings.spans.schedule_delay,
        timeout: settings.spans.timeout,
        endpoint: settings.endpoint.clone(),
        counters: counters.clone(),
        stop: stop.clone(),
        failing: false,
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("ballast-trace-export".into()).spawn(move || {
        // The exporter's own HTTP client makes no spans of ours; its
        // events are kept out of the traces all the same.
        let _quiet = Context::enter_telemetry_suppressed_scope();
        runtime.block_on(batcher.run());
        let _ = done_tx.send(());
    })?;
    let endpoint = settings.endpoint.clone();
    Ok((Offer { spans, stop: stop.clone(), counters }, Running { endpoint, stop, done }))
}

/// Takes batches off the queue and exports them, one export at a time (the
/// exporter's contract).
struct Batcher<E> {
    queue: mpsc::Receiver<SpanData>,
    exporter: E,
    batch_size: usize,
    delay: Duration,
    timeout: Duration,
    endpoint: String,
    counters: Counters,
    stop: CancellationToken,
    /// Whether the last export failed: the log says so once per outage.
    failing: bool,
}

impl<E: SpanExporter> Batcher<E> {
    async fn run(mut self) {
        let mut batch = Vec::with_capacity(self.batch_size);
        while self.next_batch(&mut batch).await {
            self.export(std::mem::take(&mut batch)).await;
        }
        // Stopping: nothing new comes in; what is queued goes out.
        self.queue.close();
        loop {
            if !batch.is_empty() {
                self.export(std::mem::take(&mut batch)).await;
            }
            if self.queue.recv_many(&mut batch, self.batch_size).await == 0 {
                break;
            }
        }
        let _ = self.exporter.shutdown();
    }

    /// Waits for a first span, then until the batch is full or `delay` has
    /// passed; `false` when the exporter is stopping (the batch may still
    /// hold spans then).
    async fn next_batch(&mut self, batch: &mut Vec<SpanData>) -> bool {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => return false,
            n = self.queue.recv_many(batch, self.batch_size) => if n == 0 { return false },
        }
        let deadline = tokio::time::sleep(self.delay);
        tokio::pin!(deadline);
        while batch.len() < self.batch_size {
            let room = self.batch_size - batch.len();
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                () = &mut deadline => break,
                n = self.queue.recv_many(batch, room) => if n == 0 { break },
            }
        }
        true
    }

    async fn export(&mut self, batch: Vec<SpanData>) {
        let n = batch.len() as u64;
        let failure = match tokio::time::timeout(self.timeout, self.exporter.export(batch)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {:?}", self.timeout)),
        };
        match failure {
            None => {
                self.counters.exported.increment(n);
                if std::mem::take(&mut self.failing) {
                    tracing::info!(endpoint = %self.endpoint, "trace export works again");
                }
            }
            Some(error) => {
                self.counters.export_failed.increment(n);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        %error,
                        "trace export failed; spans are dropped and counted in {DROPPED} until it works again"
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use ballast_config::{Sampler, SpanPipeline, TraceExport};
    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceFlags, TraceId, TraceState};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

    use super::*;

    fn settings(queue_size: usize, batch_size: usize) -> TraceExport {
        TraceExport {
            endpoint: "http://collector.invalid:4318/v1/traces".into(),
            headers: Vec::new(),
            spans: SpanPipeline {
                timeout: Duration::from_millis(200),
                service_name: "test".into(),
                resource_attributes: Vec::new(),
                sampler: Sampler::DEFAULT,
                queue_size,
                batch_size,
                schedule_delay: Duration::from_millis(10),
            },
        }
    }

    fn span(n: u64) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(u128::from(n) + 1),
                SpanId::from(n + 1),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "s".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: opentelemetry::trace::Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    /// A collector that answers nothing until released, counting what it got.
    #[derive(Debug, Clone, Default)]
    struct Stalled {
        received: Arc<AtomicUsize>,
        release: CancellationToken,
    }

    impl SpanExporter for Stalled {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.release.cancelled().await;
            self.received.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn metric(handle: &metrics_exporter_prometheus::PrometheusHandle, line: &str) -> u64 {
        let text = handle.render();
        text.lines()
            .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {line} in:\n{text}"))
    }

    #[tokio::test]
    async fn a_stalled_collector_costs_spans_not_time() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let collector = Stalled::default();
        let mut stalled = settings(64, 16);
        // Longer than the test: the first batch stays in the collector's hands.
        stalled.spans.timeout = Duration::from_secs(3600);
        let (offer, running) =
            metrics::with_local_recorder(&recorder, || start(collector.clone(), &stalled)).unwrap();
        // Every offer returns at once: the queue fills, the rest is counted.
        for n in 0..10_000 {
            offer.on_end(span(n));
        }
        let dropped = metric(&handle, "ballast_trace_spans_dropped_total{reason=\"queue_full\"}");
        // At most the queue and one batch got in.
        assert!((10_000 - 64 - 16..10_000).contains(&dropped), "dropped {dropped}");
        assert_eq!(collector.received.load(Ordering::SeqCst), 0);

        // An unsampled span is not offered at all.
        let mut unsampled = span(1);
        unsampled.span_context = SpanContext::new(
            TraceId::from(7u128),
            SpanId::from(7u64),
            TraceFlags::default(),
            false,
            TraceState::default(),
        );
        offer.on_end(unsampled);
        assert_eq!(metric(&handle, "ballast_trace_spans_dropped_total{reason=\"queue_full\"}"), dropped);

        // Released, the collector gets every span that got in.
        collector.release.cancel();
        offer.shutdown().unwrap();
        running.finish(Duration::from_secs(10)).await;
        let received = collector.received.load(Ordering::SeqCst) as u64;
        assert_eq!(received + dropped, 10_000);
        assert_eq!(metric(&handle, "ballast_trace_spans_exported_total"), received);
    }

    #[tokio::test]
    async fn what_is_queued_at_shutdown_is_exported_in_batches() {
        #[derive(Debug, Clone, Default)]
        struct Batches(Arc<std::sync::Mutex<Vec<usize>>>);
        impl SpanExporter for Batches {
            async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
                self.0.lock().unwrap().push(batch.len());
                Ok(())
            }
        }
        let collector = Batches::default();
        let mut slow = settings(1000, 40);
        // A delay far longer than the test: only the shutdown sends them.
        slow.spans.schedule_delay = Duration::from_secs(3600);
        let (offer, running) = start(collector.clone(), &slow).unwrap();
        for n in 0..100 {
            offer.on_end(span(n));
        }
        offer.shutdown().unwrap();
        running.finish(Duration::from_secs(10)).await;
        let batches = collector.0.lock().unwrap().clone();
        assert_eq!(batches.iter().sum::<usize>(), 100, "{batches:?}");
        assert!(batches.iter().all(|n| *n <= 40), "{batches:?}");
    }
}
