//! What a call puts in spans and metrics: the OpenTelemetry HTTP client
//! attributes and ballast's own, and never a secret of its URL or its key.

use std::sync::{Arc, Mutex};

use ballast::{IdempotencyKey, Retry};
use ballast_http::{metrics::SystemMetrics, HttpSystem, Request};
use ballast_test_support::{Reply, Upstream};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Every span's name and every field recorded on it, as `span field=value` lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut Vec<String>, &'static str);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push(format!("{} {}={value:?}", self.1, field.name()));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{} {}={value}", self.1, field.name()));
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for Captured {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut lines = self.0.lock().unwrap();
        attrs.record(&mut Fields(&mut lines, attrs.metadata().name()));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let name = ctx.span(id).map_or("?", |s| s.name());
        values.record(&mut Fields(&mut self.0.lock().unwrap(), name));
    }
}

impl Captured {
    fn text(&self) -> String {
        self.0.lock().unwrap().join("\n")
    }
}

#[tokio::test]
async fn spans_follow_the_conventions_and_keep_secrets_out() {
    let captured = Captured::default();
    let _tracing = tracing::subscriber::set_default(tracing_subscriber::registry().with(captured.clone()));
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let server =
        Upstream::start(|_, n| if n == 1 { Reply::status(503) } else { Reply::body(200, "ok") }).await;
    let base = format!("http://user:p4ssw0rd@{}/api/", server.addr);
    let pay = HttpSystem::builder("pay", &base)
        .policy(|p| p.retry(Retry::attempts(3)).listener(SystemMetrics::register("pay")))
        .dedupes_by_key(true)
        .build()
        .unwrap();
    let key = IdempotencyKey::v5("order-1", "pay");
    let paid =
        pay.write(&key, Request::post("payments").query(&[("token", "s3cret")]).body("100")).await.unwrap();
    assert_eq!(paid.attempts(), 2);

    let spans = captured.text();
    for expected in [
        "ballast.call ballast.system=pay",
        "ballast.call ballast.kind=keyed_write",
        "ballast.call ballast.attempts=2",
        "ballast.attempt ballast.attempt=2",
        "ballast.attempt error.type=transient",
        "ballast.http http.request.method=POST",
        "ballast.http.attempt otel.kind=client",
        "ballast.http.attempt server.address=127.0.0.1",
        "ballast.http.attempt http.request.resend_count=1",
        "ballast.http.attempt http.response.status_code=503",
        "ballast.http.attempt error.type=503",
        "ballast.http.attempt http.response.status_code=200",
        "ballast.http http.response.status_code=200",
    ] {
        assert!(spans.contains(expected), "no `{expected}` in\n{spans}");
    }
    // The conventions' url.full: no userinfo (it travels as Authorization), no query.
    assert!(spans.contains(&format!("url.full=http://{}/api/payments", server.addr)), "{spans}");
    let metrics = prometheus.render();
    for secret in ["p4ssw0rd", "s3cret", key.as_str()] {
        assert!(!spans.contains(secret), "{secret} in a span:\n{spans}");
        assert!(!metrics.contains(secret), "{secret} in the metrics:\n{metrics}");
    }
    assert!(metrics.contains("ballast_calls_total"), "the metrics were recorded: {metrics}");
}
