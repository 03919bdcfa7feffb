//! Trace context across the durable hand-over (feature `otel`): the trace of
//! the request that deferred a write reappears on the worker's delivery span
//! and in the `traceparent` the upstream receives.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{Backoff, IdempotencyKey, Policy, Retry, Timeout};
use ballast_http::{DeliveryHandler, HttpSystem, Request, DELIVERY_KIND};
use ballast_queue::{Handover, Queue, TaskState, Worker};
use ballast_test_support::{Reply, Upstream};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use support::ms;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The trace id in a `traceparent` header: `00-{trace id}-{span id}-{flags}`.
fn trace_of(traceparent: &str) -> &str {
    traceparent.split('-').nth(1).unwrap_or_default()
}

#[tokio::test]
async fn a_deferred_write_s_delivery_continues_the_trace_that_deferred_it() {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let _tracing = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let up = Arc::new(Mutex::new(false));
    let server = {
        let up = Arc::clone(&up);
        Upstream::start(move |_, _| if *up.lock().unwrap() { Reply::status(201) } else { Reply::status(503) })
            .await
    };
    let policy = Policy::builder("sber")
        .retry(Retry::attempts(2).backoff(Backoff::exponential(ms(100)).max_delay(ms(200))).without_budget())
        .timeout(Timeout::aggressive(Duration::from_secs(2)))
        .seed(7);
    let sber = HttpSystem::builder("sber", &server.url("/api/"))
        .policy(|_| policy)
        .dedupes_by_key(true)
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let queue = Queue::connect(&format!("sqlite://{}", dir.path().join("tasks.db").display())).await.unwrap();
    queue.migrate().await.unwrap();

    let checkout = tracing::info_span!("checkout");
    let trace_id = checkout.context().span().span_context().trace_id().to_string();
    let key = IdempotencyKey::v5("order-7", "pay");
    let handover = sber.write_or_defer(&key, &queue, Request::post("payments")).instrument(checkout).await;
    let Ok(Handover::Deferred { task_id, .. }) = handover else {
        panic!("deferred during the outage: {handover:?}")
    };

    *up.lock().unwrap() = true;
    let worker = Worker::builder(queue.clone())
        .handler(DELIVERY_KIND, DeliveryHandler::new([sber]))
        .poll_interval(ms(20))
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn(worker.run(stop.clone()).in_current_span());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while queue.get(task_id).await.unwrap().unwrap().state != TaskState::Completed {
        assert!(tokio::time::Instant::now() < deadline, "the delivery never completed");
        tokio::time::sleep(ms(20)).await;
    }
    stop.cancel();
    running.await.unwrap();

    let received: Vec<String> =
        server.requests().iter().map(|r| r.header("traceparent").unwrap_or_default().to_owned()).collect();
    assert_eq!(received.len(), 3, "2 attempts in memory, 1 delivery: {received:?}");
    for traceparent in &received {
        assert_eq!(trace_of(traceparent), trace_id, "every attempt, the delivery's included: {received:?}");
    }
    let spans = exporter.get_finished_spans().unwrap();
    let delivery = spans.iter().find(|s| s.name == "ballast.delivery").expect("a delivery span");
    assert_eq!(delivery.span_context.trace_id().to_string(), trace_id);
    let attempts: Vec<_> = spans.iter().filter(|s| s.name == "ballast.http.attempt").collect();
    assert_eq!(attempts.len(), 3);
    assert!(attempts.iter().all(|s| s.span_context.trace_id().to_string() == trace_id));
    // The upstream's parent is the attempt that sent it, not the deferring request.
    let last = received.last().unwrap();
    assert!(attempts.iter().any(|s| last.contains(&s.span_context.span_id().to_string())), "{last}");
}
