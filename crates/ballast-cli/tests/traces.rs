//! Traces out of the real `ballast serve`, to a real OTLP/HTTP receiver: the
//! caller's trace continued through the gateway, every attempt and a
//! deferred write's delivery; the caller's sampling decision kept; a
//! collector that hangs or is gone costs spans, never calls.

mod support;

use std::collections::HashMap;

use ballast_test_support::otlp::{tree, Collector, Exported, SpanKind};
use ballast_test_support::{eventually, send, Reply, Upstream};
use support::{client, Served};

const TOKEN: &str = "gateway-token-0123456789";
const PARTNER_KEY: &str = "partner-key-secret-42";
const CALLER_SECRET: &str = "caller-api-secret-7";
const PASSWORD: &str = "pa55word-in-url";
const CARD: &str = "4111111111111111";
const SEAL_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
const KEY: &str = "order-77-pay";

/// A system behind a password in its URL and a partner key from the
/// environment, retried 3 times fast; the gateway behind a token; the file's
/// collector and name overridden by the variables.
const FILE: &str = include_str!("configs/traces.toml");

fn env<'a>(collector: &str, extra: &[(&'a str, &str)]) -> Vec<(&'a str, String)> {
    let mut vars = vec![
        ("TRACES_GATEWAY_TOKEN", TOKEN.to_owned()),
        ("TRACES_PARTNER_KEY", PARTNER_KEY.to_owned()),
        ("TRACES_SEAL_KEY", SEAL_KEY.to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.to_owned()),
        ("OTEL_SERVICE_NAME", "edge-gateway".to_owned()),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
    ];
    vars.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    vars
}

fn serve(upstream: &Upstream, vars: &[(&str, String)]) -> Served {
    let file = FILE.replace("{password}", PASSWORD);
    let mut served = Served::start_with(upstream, "seal_key_env = \"TRACES_SEAL_KEY\"\n", &file, vars);
    let line = served.lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(line.contains("traces to http://127.0.0.1:"), "the start says where traces go: {line:?}");
    served
}

fn traceparent(trace: &str, parent: &str, sampled: bool) -> String {
    format!("00-{trace}-{parent}-{}", if sampled { "01" } else { "00" })
}

/// The spans whose parent is `span`.
fn children<'a>(spans: &'a [Exported], span: &Exported) -> Vec<&'a Exported> {
    spans.iter().filter(|s| s.parent_id() == span.span_id()).collect()
}

/// The one child of `span` named `name`.
fn child<'a>(spans: &'a [Exported], span: &Exported, name: &str) -> &'a Exported {
    let found: Vec<_> = children(spans, span).into_iter().filter(|s| s.name() == name).collect();
    assert_eq!(found.len(), 1, "one {name} under {}: {:?}", span.name(), names(spans));
    found[0]
}

/// The client spans of one call under `top` (the gateway's or the
/// delivery's span): call → attempts → the attempt's HTTP request.
fn attempts<'a>(spans: &'a [Exported], top: &Exported) -> Vec<&'a Exported> {
    let http = child(spans, top, "ballast.http");
    let call = child(spans, http, "ballast.call");
    let mut tries: Vec<_> =
        children(spans, call).into_iter().filter(|s| s.name() == "ballast.attempt").collect();
    tries.sort_by_key(|s| s.attr("ballast.attempt").and_then(|n| n.parse::<u32>().ok()));
    tries.iter().map(|attempt| child(spans, attempt, "ballast.http.attempt")).collect()
}

fn names(spans: &[Exported]) -> Vec<String> {
    spans.iter().map(|s| format!("{}({}<-{})", s.name(), s.span_id(), s.parent_id())).collect()
}

/// A read retried twice, then a keyed write deferred during an outage and
/// delivered: one trace from the caller's parent through the gateway's
/// server spans, every attempt and the delivery; the conventions'
/// attributes; no secret anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_caller_through_every_attempt_to_the_delivery() {
    let collector = Collector::start().await;
    // Requests 1–3: the read, 503 twice; 4–6: the write's attempts, in an
    // outage; 7: the delivery, after it.
    let upstream = Upstream::start(|seen, n| match seen.method.as_str() {
        "GET" if n <= 2 => Reply::status(503),
        "GET" => Reply::body(200, r#"{"order":77}"#),
        _ if n <= 6 => Reply::status(503),
        _ => Reply::body(201, r#"{"payment":"p-77"}"#),
    })
    .await;
    let served = serve(&upstream, &env(&collector.endpoint(), &[]));
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (read_parent, write_parent) = ("00f067aa0ba902b7", "00f067aa0ba902b8");

    let read = send(
        client().get(format!("{}/call/pay/orders/77?card={CARD}", served.gateway)).bearer_auth(TOKEN),
        &[("traceparent", &traceparent(trace, read_parent, true)), ("x-api-key", CALLER_SECRET)],
    )
    .await;
    assert_eq!((read.status().as_u16(), read.headers()["ballast-attempts"].to_str().unwrap()), (200, "3"));

    let deferred = send(
        client()
            .post(format!("{}/call/pay/payments", served.gateway))
            .bearer_auth(TOKEN)
            .body(format!(r#"{{"card":"{CARD}"}}"#)),
        &[
            ("traceparent", &traceparent(trace, write_parent, true)),
            ("idempotency-key", KEY),
            ("prefer", "respond-async"),
            ("x-api-key", CALLER_SECRET),
        ],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 202, "deferred during the outage");
    let location = deferred.headers()["location"].to_str().unwrap().to_owned();
    let task_url = format!("{}{location}", served.gateway);
    eventually("the delivery completes", || async {
        let task = client().get(&task_url).bearer_auth(TOKEN).send().await.unwrap();
        task.json::<serde_json::Value>().await.unwrap()["state"] == "completed"
    })
    .await;
    eventually("the delivery's spans are exported", || async {
        let spans = collector.spans();
        // The read's 3 attempts, the write's 3 and the delivery's.
        spans.iter().filter(|s| s.name() == "ballast.http.attempt").count() >= 7
            && spans.iter().any(|s| s.name() == "ballast.delivery")
    })
    .await;
    let spans = collector.spans();
    // Shown with `--nocapture`: what a collector receives.
    eprintln!("{}", tree(&spans));

    // One trace, from the caller's parent down.
    for span in &spans {
        assert_eq!(span.trace_id(), trace, "{} is in the caller's trace: {:?}", span.name(), names(&spans));
    }
    let servers: HashMap<String, &Exported> =
        spans.iter().filter(|s| s.kind() == SpanKind::Server).map(|s| (s.parent_id(), s)).collect();
    assert_eq!(servers.len(), 2, "{:?}", names(&spans));
    let (read_span, write_span) = (servers[read_parent], servers[write_parent]);
    for (server, method, status) in [(read_span, "GET", 200), (write_span, "POST", 202)] {
        assert_eq!(server.name(), format!("{method} /call/pay"));
        assert_eq!(server.attr("http.request.method").as_deref(), Some(method));
        assert_eq!(server.int("http.response.status_code"), Some(status));
        assert_eq!(server.attr("http.route").as_deref(), Some("/call/{system}/{path}"));
        assert_eq!(server.attr("ballast.system").as_deref(), Some("pay"));
        assert_eq!(server.int("ballast.attempts"), Some(3));
        assert_eq!(
            server.resource_attr("service.name").as_deref(),
            Some("edge-gateway"),
            "the variable wins"
        );
        assert_eq!(server.resource_attr("deployment.environment").as_deref(), Some("ci"));
    }

    // Every attempt a client span under its call, and the upstream got its context.
    let received: Vec<String> =
        upstream.requests().iter().map(|r| r.header("traceparent").unwrap_or_default().to_owned()).collect();
    let read_tries = attempts(&spans, read_span);
    let write_tries = attempts(&spans, write_span);
    assert_eq!((read_tries.len(), write_tries.len()), (3, 3));
    for (n, attempt) in read_tries.iter().chain(&write_tries).enumerate() {
        assert_eq!(attempt.kind(), SpanKind::Client);
        assert_eq!(
            received[n],
            traceparent(trace, &attempt.span_id(), true),
            "request {n} carries its attempt"
        );
        let resend = attempt.int("http.request.resend_count");
        assert_eq!(resend, [None, Some(1), Some(2)][n % 3], "attempt {n}");
        assert_eq!(attempt.attr("http.request.method").as_deref(), Some(if n < 3 { "GET" } else { "POST" }));
        assert_eq!(attempt.attr("server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attempt.int("server.port"), Some(i64::from(upstream.addr.port())));
        let url = attempt.attr("url.full").unwrap_or_default();
        let path = if n < 3 { "/api/orders/77" } else { "/api/payments" };
        assert_eq!(url, format!("http://{}{path}", upstream.addr), "no userinfo, no query");
    }
    let statuses: Vec<_> =
        read_tries.iter().map(|a| (a.int("http.response.status_code"), a.attr("error.type"))).collect();
    let failed = (Some(503), Some("503".to_owned()));
    assert_eq!(statuses, [failed.clone(), failed, (Some(200), None)]);

    // The delivery continues the deferring request's trace and links to it.
    let delivery = spans.iter().find(|s| s.name() == "ballast.delivery").unwrap();
    assert_eq!(delivery.kind(), SpanKind::Consumer);
    assert_eq!(delivery.parent_id(), write_span.span_id(), "a child of the request that deferred it");
    assert_eq!(delivery.links(), [write_span.span_id()], "and linked to it");
    let delivered = attempts(&spans, delivery);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].int("http.response.status_code"), Some(201));
    assert_eq!(received.last().unwrap(), &traceparent(trace, &delivered[0].span_id(), true));

    // No secret in any span or resource attribute.
    for span in &spans {
        for text in span.texts() {
            for secret in [TOKEN, PARTNER_KEY, CALLER_SECRET, PASSWORD, CARD, SEAL_KEY, KEY, "shop:"] {
                assert!(!text.contains(secret), "{} carries {secret:?}: {text}", span.name());
            }
        }
    }
}

/// Parent-based sampling: a caller's sampled trace is recorded even at a
/// ratio of 0, an unsampled one is not (and the upstream hears it was not),
/// and a trace that starts at the gateway follows the ratio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_s_sampling_decision_is_kept() {
    let collector = Collector::start().await;
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let vars = env(
        &collector.endpoint(),
        &[("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"), ("OTEL_TRACES_SAMPLER_ARG", "0")],
    );
    let served = serve(&upstream, &vars);
    let get = |traceparent: Option<String>| {
        let mut request = client().get(format!("{}/call/pay/orders/1", served.gateway)).bearer_auth(TOKEN);
        if let Some(value) = traceparent {
            request = request.header("traceparent", value);
        }
        async move { assert_eq!(request.send().await.unwrap().status().as_u16(), 200) }
    };
    let (unsampled, sampled) = ("11111111111111111111111111111111", "22222222222222222222222222222222");
    get(Some(traceparent(unsampled, "1111111111111111", false))).await;
    get(None).await;
    get(Some(traceparent(sampled, "2222222222222222", true))).await;
    eventually("the sampled trace is exported", || async {
        collector.spans().iter().any(|s| s.name() == "ballast.http.attempt")
    })
    .await;
    // Spans leave in the order they end: once the last request's are in,
    // the earlier ones would have been too.
    let spans = collector.spans();
    assert!(
        spans.iter().all(|s| s.trace_id() == sampled),
        "only the caller's sampled trace: {:?}",
        names(&spans)
    );
    let received: Vec<String> =
        upstream.requests().iter().map(|r| r.header("traceparent").unwrap_or_default().to_owned()).collect();
    assert!(
        received[0].starts_with(&format!("00-{unsampled}-")) && received[0].ends_with("-00"),
        "{received:?}"
    );
    assert!(received[1].ends_with("-00"), "a trace started here at ratio 0 is not sampled: {received:?}");
    assert!(
        received[2].starts_with(&format!("00-{sampled}-")) && received[2].ends_with("-01"),
        "{received:?}"
    );
}

/// The metric `/metrics` shows for `line`, 0 if absent.
async fn metric(served: &Served, line: &str) -> u64 {
    let text = client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(line)?.trim().parse().ok()).unwrap_or(0)
}

/// A collector that hangs, then one that is gone: every call is answered as
/// before; the spans that could not go are dropped and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_hangs_or_is_gone_costs_spans_not_calls() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let stalled = Collector::stalled().await;
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    for (endpoint, reason) in [(stalled.endpoint(), "queue_full"), (gone, "export_failed")] {
        let vars = env(
            &endpoint,
            &[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "16"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "60000"),
            ],
        );
        let served = serve(&upstream, &vars);
        let before = upstream.count();
        for n in 0..60 {
            let response = client()
                .get(format!("{}/call/pay/orders/{n}", served.gateway))
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 200, "call {n} with the collector at {endpoint}");
        }
        assert_eq!(upstream.count() - before, 60);
        let line = format!("ballast_trace_spans_dropped_total{{reason=\"{reason}\"}}");
        eventually(&format!("spans are counted as {reason}"), || async { metric(&served, &line).await > 0 })
            .await;
    }
    assert!(stalled.exports() >= 1, "the stalled collector was tried");
}
