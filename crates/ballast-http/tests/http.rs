//! ballast-http against a real local HTTP server that can apply a write then
//! answer 500, reset the connection, answer late, answer 4xx and answer 429
//! with Retry-After — counting requests and side effects per key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::{
    Backoff, Breaker, BreakerState, Failure, IdempotencyKey, Policy, PolicyBuilder, Retry, StopReason,
    Timeout,
};
use ballast_http::metrics::SystemMetrics;
use ballast_http::{
    Health, HttpError, HttpSystem, PolicyLayer, Request, RequestKey, RetryOn, StreamingRequest, TransportKind,
};

mod support;

use ballast_test_support::{Reply, Upstream};
use support::ms;

fn policy(name: &str) -> PolicyBuilder {
    Policy::builder(name)
        .retry(Retry::attempts(3).backoff(Backoff::exponential(ms(100)).max_delay(ms(200))).without_budget())
        .timeout(Timeout::aggressive(ms(400)))
        .seed(7)
}

fn system(name: &str, server: &Upstream, policy: PolicyBuilder) -> ballast_http::HttpSystemBuilder {
    HttpSystem::builder(name, &server.url("/api/")).policy(|_| policy)
}

fn stop<T: std::fmt::Debug>(result: Result<T, Failure<HttpError>>) -> (StopReason, u32, Failure<HttpError>) {
    let failure = result.unwrap_err();
    (failure.stop_reason(), failure.attempts(), failure)
}

#[tokio::test]
async fn keyed_write_to_a_deduping_system_is_retried_and_takes_effect_once() {
    // A deduplicating gateway: the first request applies the payment and its
    // answer is lost (500), the second loses its connection, the third is
    // recognised by its key and answered from the stored result.
    let applied: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let effects = applied.clone();
    let server = Upstream::start(move |seen, n| {
        let key = seen.key().unwrap_or_default().to_owned();
        let mut applied = effects.lock().unwrap();
        let first = !applied.contains_key(&key);
        *applied.entry(key).or_default() += u32::from(first);
        match n {
            1 => Reply::body(500, "applied, answer lost"),
            2 => Reply::Reset,
            _ => Reply::body(201, r#"{"payment":"p-1"}"#),
        }
    })
    .await;
    let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();
    let key = IdempotencyKey::v5("order-42", "register-payment");

    let paid = sber.write(&key, Request::post("payments").json(&serde_json::json!({"amount": 100}))).await;

    let paid = paid.unwrap();
    assert_eq!(paid.status(), 201);
    assert_eq!(paid.json::<serde_json::Value>().unwrap()["payment"], "p-1");
    let requests = server.requests();
    assert!(requests.len() <= 3, "sent {} times", requests.len());
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.method == "POST" && r.target == "/api/payments"));
    assert!(requests.iter().all(|r| r.key() == Some(key.as_str())), "the same key every attempt");
    assert_eq!(applied.lock().unwrap()[key.as_str()], 1, "the payment took effect once");
}

#[tokio::test]
async fn keyed_write_to_a_system_that_does_not_dedupe_sends_the_key_once() {
    let server = Upstream::start(|_, _| Reply::body(503, "busy")).await;
    let crm = system("crm", &server, policy("crm")).build().unwrap();
    let key = IdempotencyKey::v5("lead-7", "create");

    let (reason, attempts, failure) = stop(crm.write(&key, Request::post("leads")).await);

    assert_eq!((reason, attempts), (StopReason::NotDeduplicated, 1));
    assert_eq!(reason.rule().map(ballast::Rule::id), Some("R-RES-RE-1"));
    assert_eq!(failure.error().and_then(HttpError::status), Some(http::StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(server.requests()[0].key(), Some(key.as_str()), "the key is still sent");
    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn write_once_is_sent_exactly_once_on_503_and_on_reset() {
    let server =
        Upstream::start(
            |seen, _| if seen.target.ends_with("busy") { Reply::status(503) } else { Reply::Reset },
        )
        .await;
    let sms = system("sms", &server, policy("sms")).build().unwrap();

    let (reason, attempts, _) = stop(sms.write_once(Request::post("busy")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::NotRetryable, 1, 1));

    let (reason, attempts, failure) = stop(sms.write_once(Request::post("reset").body("hi")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::NotRetryable, 1, 2));
    match failure.error() {
        Some(HttpError::Transport { kind, class, .. }) => {
            assert!(matches!(kind, TransportKind::Reset | TransportKind::Incomplete), "{kind:?}");
            assert_eq!(*class, ballast::Class::Transient);
        }
        other => panic!("expected a transport error, got {other:?}"),
    }

    let streamed = StreamingRequest::new(http::Method::POST, "busy", bytes::Bytes::from_static(b"chunk"));
    let (reason, attempts, _) = stop(sms.write_once(streamed).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::NotRetryable, 1, 3));
    assert!(server.requests().iter().all(|r| r.key().is_none()));
}

#[tokio::test]
async fn a_4xx_is_sent_once_and_its_response_kept() {
    let server = Upstream::start(|_, _| Reply::body(422, r#"{"error":"card_declined"}"#)).await;
    let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();

    let (reason, attempts, failure) = stop(sber.read(Request::get("orders/1")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::Permanent, 1, 1));
    let response = failure.error().and_then(HttpError::response).unwrap();
    assert_eq!(response.json::<serde_json::Value>().unwrap()["error"], "card_declined");
    assert!(failure.to_string().contains("R-RES-RE-X2"), "{failure}");

    let key = IdempotencyKey::v5("order-1", "pay");
    let (reason, _, _) = stop(sber.write(&key, Request::post("payments")).await);
    assert_eq!((reason, server.count()), (StopReason::Permanent, 2));
}

#[tokio::test]
async fn reads_are_retried_after_timeouts_and_writes_are_refused_by_read() {
    let server = Upstream::start(|_, n| match n {
        1 => Reply::body(200, "late").after(ms(1000)),
        _ => Reply::body(200, "fresh"),
    })
    .await;
    let stock = system("stock", &server, policy("stock")).read_timeout(ms(100)).build().unwrap();

    let response = stock.read(Request::get("items").query(&[("sku", "a b")])).await.unwrap();
    assert_eq!(response.text(), "fresh");
    assert_eq!(server.count(), 2);
    assert_eq!(server.requests()[1].target, "/api/items?sku=a+b");

    let (reason, attempts, failure) = stop(stock.read(Request::post("items")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::Permanent, 0, 2));
    assert!(failure.to_string().contains("R-RES-RE-1"), "{failure}");
    assert!(stock.read(Request::post_query("items/search")).await.is_ok());
}

#[tokio::test]
async fn the_policys_attempt_timeout_ends_a_write_once_that_drips() {
    let server = Upstream::start(|_, _| Reply::body(200, ".".repeat(50)).dripped(ms(40))).await;
    let slow = system("slow", &server, policy("slow").timeout(Timeout::aggressive(ms(150)))).build().unwrap();

    let (reason, attempts, failure) = stop(slow.write_once(Request::post("jobs")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::NotRetryable, 1, 1));
    assert!(matches!(failure, Failure::Timeout { .. }), "{failure:?}");
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after_only_when_opted_in() {
    let retry_after = |secs: &str| Reply::body(429, "slow down").header("retry-after", secs);
    let server =
        Upstream::start(move |seen, _| retry_after(if seen.target.ends_with("/far") { "120" } else { "1" }))
            .await;
    let permanent = system("a", &server, policy("a")).build().unwrap();
    let (reason, _, _) = stop(permanent.read(Request::get("limited")).await);
    assert_eq!((reason, server.count()), (StopReason::Permanent, 1));

    // Two attempts of up to 600 ms: a window wide enough for a 1 s Retry-After.
    let two = policy("b").retry(Retry::attempts(2).without_budget()).timeout(Timeout::aggressive(ms(600)));
    let opted = system("b", &server, two).retry_on(RetryOn::default().with_429(true)).build().unwrap();
    let started = tokio::time::Instant::now();
    let (reason, attempts, _) = stop(opted.read(Request::get("limited")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::Exhausted, 2, 3));
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After: 1 honoured before the retry");

    // A wait beyond the policy's window is not waited out (R-RES-RE-4).
    let before = server.count();
    let (reason, _, _) = stop(opted.read(Request::get("far")).await);
    assert_eq!((reason, server.count() - before), (StopReason::DeadlineWouldOverrun, 1));
}

#[tokio::test]
async fn the_breaker_opens_under_an_outage_and_only_the_probe_reaches_the_server() {
    let healthy = Arc::new(Mutex::new(false));
    let up = healthy.clone();
    let server =
        Upstream::start(
            move |_, _| if *up.lock().unwrap() { Reply::body(200, "ok") } else { Reply::status(503) },
        )
        .await;
    let breaker = Breaker::consecutive(3).half_open_after(ms(300));
    let sber = system("sber", &server, policy("sber").breaker(breaker)).critical(true).build().unwrap();
    let other = system("sms", &server, policy("sms").breaker(Breaker::consecutive(3))).build().unwrap();
    let health = Health::from_systems([&sber, &other]);
    assert!(health.ready());

    let (reason, attempts, _) = stop(sber.read(Request::get("orders")).await);
    assert_eq!((reason, attempts, server.count()), (StopReason::Exhausted, 3, 3));
    assert_eq!(sber.breaker_state(), Some(BreakerState::Open));
    for _ in 0..5 {
        let (reason, attempts, failure) = stop(sber.read(Request::get("orders")).await);
        assert_eq!((reason, attempts), (StopReason::Rejected, 0));
        assert!(failure.is_unavailable());
    }
    assert_eq!(server.count(), 3, "an open breaker keeps calls off the server");
    assert!(!health.ready());
    let report = serde_json::to_value(health.report()).unwrap();
    assert_eq!(report["ready"], false);
    assert_eq!(report["systems"][0]["system"], "sber");
    assert_eq!(report["systems"][0]["state"], "open");
    assert!(report["systems"][0]["next_probe_in_secs"].as_f64().unwrap() <= 0.3);
    assert_eq!(report["systems"][1]["critical"], false);
    assert_eq!(report["systems"][1]["state"], "closed");

    *healthy.lock().unwrap() = true;
    tokio::time::sleep(ms(350)).await;
    assert!(health.ready(), "the probe time has come: ready, so traffic can bring the probe");
    assert_eq!(sber.read(Request::get("orders")).await.unwrap().text(), "ok");
    assert_eq!(server.count(), 4, "the probe reached the server");
    assert_eq!(sber.breaker_state(), Some(BreakerState::Closed));
    assert!(health.ready() && health.live());
}

#[tokio::test]
async fn a_refused_connection_is_transient_and_retried() {
    let refusing = ballast_test_support::Refusing::new();
    let closed = refusing.addr;
    let down = HttpSystem::builder("down", &format!("http://{closed}/")).policy(|_| policy("down"));

    let (reason, attempts, failure) = stop(down.build().unwrap().read(Request::get("x")).await);

    assert_eq!((reason, attempts), (StopReason::Exhausted, 3));
    assert!(
        matches!(failure.error(), Some(HttpError::Transport { kind: TransportKind::Connect, .. })),
        "{failure:?}"
    );
}

#[tokio::test]
async fn credentials_and_query_values_stay_out_of_error_messages() {
    let refusing = ballast_test_support::Refusing::new();
    let closed = refusing.addr;
    let down = HttpSystem::builder("down", &format!("http://app:s3cret@{closed}/api/"))
        .policy(|p| p.retry(Retry::never()))
        .build()
        .unwrap();
    let failure = down.read(Request::get("x").query(&[("token", "s3cret")])).await.unwrap_err();
    let shown = format!("{failure} / {failure:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    // The credentials move into a header; the query is masked.
    assert!(shown.contains("/api/x?token=***"), "still says where: {shown}");

    let refused = HttpSystem::builder("a", "ftp://app:s3cret@h/").build().unwrap_err();
    let shown = format!("{refused} / {refused:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[tokio::test]
async fn builder_settings_that_cannot_work_are_refused() {
    let server = Upstream::start(|_, _| Reply::status(200)).await;
    let named = |n: &str| Policy::builder(n);
    let err = |b: ballast_http::HttpSystemBuilder| b.build().unwrap_err().to_string();

    assert!(err(HttpSystem::builder("a", &server.url("/api/")).policy(|_| named("b")))
        .contains("the system is \"a\""));
    assert!(err(HttpSystem::builder("a", "ftp://x/")).contains("http"));
    assert!(err(HttpSystem::builder("a", "not a url")).contains("invalid base URL"));
    assert!(err(HttpSystem::builder("a", &server.url("/api/")).connect_timeout(Duration::from_secs(9)))
        .contains("connect timeout"));
    assert!(err(HttpSystem::builder("a", &server.url("/api/")).idempotency_header("bad header"))
        .contains("header"));
    let sys = HttpSystem::builder("a", &server.url("/api/")).build().unwrap();
    assert!(!sys.dedupes_by_key() && !sys.is_critical() && sys.breaker_state().is_none());
    assert_eq!(sys.retry_on(), RetryOn::default());
    let (_, attempts, failure) = stop(sys.read(Request::get("x").header("bad header", "v")).await);
    assert_eq!((attempts, server.count()), (0, 0));
    assert!(failure.to_string().contains("not sent"));
}

#[tokio::test(start_paused = true)]
async fn the_layer_chooses_read_keyed_or_once_from_the_method_and_the_key_extension() {
    use tower::ServiceExt;

    type Calls = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let calls: Calls = Arc::default();
    let log = calls.clone();
    let inner = tower::service_fn(move |req: http::Request<String>| {
        let log = log.clone();
        async move {
            let key = req.headers().get("idempotency-key").map(|v| v.to_str().unwrap().to_owned());
            let mut log = log.lock().unwrap();
            log.push((req.method().to_string(), key));
            let status = if log.len() % 2 == 1 { 503 } else { 200 };
            Ok::<_, std::io::Error>(http::Response::builder().status(status).body(String::new()).unwrap())
        }
    });
    let service = PolicyLayer::new(policy("crm").build().unwrap()).dedupes_by_key(true).layer_on(inner);

    let get = http::Request::get("/leads").body(String::new()).unwrap();
    assert_eq!(service.clone().oneshot(get).await.unwrap().status(), 200);
    let mut keyed = http::Request::post("/leads").body("{}".to_owned()).unwrap();
    let key = IdempotencyKey::v5("lead-1", "create");
    keyed.extensions_mut().insert(RequestKey(key.clone()));
    assert_eq!(service.clone().oneshot(keyed).await.unwrap().status(), 200);
    let once = http::Request::post("/leads").body("{}".to_owned()).unwrap();
    let answer = service.clone().oneshot(once).await.expect("an answer, not a failure");
    assert_eq!(answer.status(), 503, "the one attempt's answer, as it came");

    let calls = calls.lock().unwrap().clone();
    let k = Some(key.as_str().to_owned());
    assert_eq!(
        calls,
        [
            ("GET".into(), None),
            ("GET".into(), None),
            ("POST".into(), k.clone()),
            ("POST".into(), k),
            ("POST".into(), None),
        ]
    );
}

/// `Layer::layer`, readable at the call site.
trait LayerOn<S>: tower::Layer<S> {
    fn layer_on(&self, inner: S) -> Self::Service {
        self.layer(inner)
    }
}
impl<S> LayerOn<S> for PolicyLayer {}

/// The value of the sample of `name` whose labels include every pair.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name}{labels:?} in\n{text}"))
}

#[tokio::test]
async fn prometheus_text_counts_a_scripted_scenario() {
    let server = Upstream::start(|seen, n| match seen.target.as_str() {
        "/api/flaky" if n == 2 => Reply::status(500),
        "/api/missing" => Reply::status(404),
        "/api/sms" => Reply::status(503),
        _ => Reply::body(200, "ok"),
    })
    .await;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prometheus = recorder.handle();
    let system = metrics::with_local_recorder(&recorder, || {
        ballast_http::metrics::describe();
        let policy = policy("m").listener(SystemMetrics::register("m"));
        HttpSystem::builder("m", &server.url("/api/")).policy(|_| policy).build().unwrap()
    });

    system.read(Request::get("fine")).await.unwrap(); // n = 1: ok
    system.read(Request::get("flaky")).await.unwrap(); // n = 2: 500, n = 3: ok after one retry
    stop(system.read(Request::get("missing")).await); // 404: permanent
    stop(system.write_once(Request::post("sms")).await); // 503: not retried

    let text = prometheus.render();
    let m = ("system", "m");
    assert_eq!(sample(&text, "ballast_calls_total", &[m, ("kind", "read"), ("outcome", "ok")]), 2.0);
    assert_eq!(sample(&text, "ballast_calls_total", &[m, ("kind", "read"), ("outcome", "permanent")]), 1.0);
    let once_failed = [m, ("kind", "write_once"), ("outcome", "transient")];
    assert_eq!(sample(&text, "ballast_calls_total", &once_failed), 1.0);
    assert_eq!(sample(&text, "ballast_calls_total", &[m, ("kind", "keyed_write"), ("outcome", "ok")]), 0.0);
    assert_eq!(sample(&text, "ballast_attempts_total", &[m, ("outcome", "ok")]), 2.0);
    assert_eq!(sample(&text, "ballast_attempts_total", &[m, ("outcome", "transient")]), 2.0);
    assert_eq!(sample(&text, "ballast_attempts_total", &[m, ("outcome", "permanent")]), 1.0);
    assert_eq!(sample(&text, "ballast_retries_total", &[m]), 1.0);
    assert_eq!(sample(&text, "ballast_giveups_total", &[m, ("reason", "permanent")]), 1.0);
    assert_eq!(sample(&text, "ballast_giveups_total", &[m, ("reason", "not_retryable")]), 1.0);
    assert_eq!(sample(&text, "ballast_giveups_total", &[m, ("reason", "exhausted")]), 0.0);
    assert_eq!(sample(&text, "ballast_breaker_state", &[m]), 0.0);
    assert_eq!(sample(&text, "ballast_bulkhead_in_flight", &[m]), 0.0);
    assert_eq!(sample(&text, "ballast_call_duration_seconds_count", &[m]), 4.0);
    assert!(text.contains("# HELP ballast_calls_total"), "{text}");
}

/// Hand-over of keyed writes to the durable queue and their later delivery.
#[cfg(feature = "queue")]
mod delivery {
    use super::*;

    use ballast_http::{Delivery, DeliveryHandler, DELIVERY_KIND};
    use ballast_queue::{Handover, ListFilter, NewTask, Queue, TaskInfo, TaskState, Worker};
    use tokio_util::sync::CancellationToken;

    async fn queue(dir: &tempfile::TempDir) -> Queue {
        let queue =
            Queue::connect(&format!("sqlite://{}", dir.path().join("tasks.db").display())).await.unwrap();
        queue.migrate().await.unwrap();
        queue
    }

    /// A queue in a temp dir whose tasks get `max_attempts` attempts.
    async fn queue_of_attempts(max_attempts: u32) -> (tempfile::TempDir, Queue) {
        let dir = tempfile::tempdir().unwrap();
        let schedule = ballast_queue::DurableSchedule { max_attempts, ..Default::default() };
        let queue = queue(&dir).await.with_schedule(schedule);
        (dir, queue)
    }

    async fn tasks(queue: &Queue) -> Vec<TaskInfo> {
        queue.list(&ListFilter::default()).await.unwrap()
    }

    /// Runs a worker with `handler` until every task is final (10 s at most).
    async fn work_off(queue: &Queue, handler: DeliveryHandler) -> Vec<TaskInfo> {
        let final_ = |t: &TaskInfo| matches!(t.state, TaskState::Completed | TaskState::Failed);
        work_until(queue, handler, |tasks| tasks.iter().all(final_)).await
    }

    /// Runs a worker with `handler` (polling every 50 ms, backing off from
    /// 20 ms) until `settled` holds for the tasks (10 s at most).
    async fn work_until(
        queue: &Queue,
        handler: DeliveryHandler,
        settled: impl Fn(&[TaskInfo]) -> bool,
    ) -> Vec<TaskInfo> {
        let worker = Worker::builder(queue.clone())
            .handler(DELIVERY_KIND, handler)
            .poll_interval(ms(50))
            .backoff(ballast_queue::DurableBackoff::exponential(ms(20)))
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(worker.run(shutdown.clone()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let tasks = loop {
            let tasks = tasks(queue).await;
            if settled(&tasks) || tokio::time::Instant::now() > deadline {
                break tasks;
            }
            tokio::time::sleep(ms(20)).await;
        };
        shutdown.cancel();
        running.await.unwrap();
        tasks
    }

    /// A gateway that deduplicates by key: answers 503 while down, then
    /// applies each key's effect once and answers 201.
    async fn gateway(up: Arc<Mutex<bool>>, applied: Arc<Mutex<HashMap<String, u32>>>) -> Upstream {
        Upstream::start(move |seen, _| {
            if !*up.lock().unwrap() {
                return Reply::body(503, "down");
            }
            if seen.target.ends_with("/refused") {
                return Reply::body(422, r#"{"error":"amount"}"#);
            }
            *applied.lock().unwrap().entry(seen.key().unwrap_or_default().to_owned()).or_default() += 1;
            Reply::body(201, r#"{"payment":"p-1"}"#)
        })
        .await
    }

    #[tokio::test]
    async fn a_write_deferred_during_an_outage_is_delivered_once_after_it_with_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let (up, applied) = (Arc::new(Mutex::new(false)), Arc::default());
        let server = gateway(up.clone(), Arc::clone(&applied)).await;
        let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();
        let key = IdempotencyKey::v5("order-42", "register-payment");
        let pay = || Request::post("payments").query(&[("v", "2")]).json(&serde_json::json!({"amount": 100}));

        let Ok(Handover::Deferred { task_id: deferred, .. }) = sber.write_or_defer(&key, &queue, pay()).await
        else {
            panic!("a write that ran out of attempts on 503s is deferred");
        };
        assert_eq!(server.count(), 3, "three attempts in memory, then the hand-over");
        let Ok(Handover::Deferred { task_id: again, .. }) = sber.write_or_defer(&key, &queue, pay()).await
        else {
            panic!("deferred again");
        };
        assert_eq!(again, deferred, "one task per user action");
        assert_eq!(server.count(), 3, "the same request joins its deferred task: nothing sent");
        assert_eq!(queue.list(&ballast_queue::ListFilter::default()).await.unwrap().len(), 1);
        let task = queue.get(deferred).await.unwrap().unwrap();
        assert_eq!(
            (task.kind.as_str(), task.key.as_deref()),
            (ballast_http::delivery_kind("sber").as_str(), Some(key.as_str()))
        );
        let stored: Delivery = serde_json::from_value(task.payload).unwrap();
        let captured = stored.first_attempt_at.expect("the first attempt's time is stored");
        assert!(captured <= now_millis() && captured + 60_000 > now_millis(), "{captured}");
        assert_eq!(stored.access.as_ref().map(String::len), Some(32), "a handle's secret");
        let expected = Delivery {
            first_attempt_at: stored.first_attempt_at,
            access: stored.access.clone(),
            caller: stored.caller.clone(),
            deferred_because: Some(ballast_http::DeferredBecause::AttemptsExhausted),
            ..Delivery::from_request("sber", &pay()).unwrap()
        };
        assert_eq!(stored, expected, "stored as sent, with why it was deferred");

        *up.lock().unwrap() = true;
        let done = work_off(&queue, DeliveryHandler::new([sber])).await;

        assert_eq!(done[0].state, TaskState::Completed);
        let requests = server.requests();
        assert_eq!(requests.len(), 4, "3 attempts in memory, 1 delivery");
        assert!(requests.iter().all(|r| r.key() == Some(key.as_str())), "the same key every time");
        let delivered = requests.last().unwrap();
        assert_eq!((delivered.method.as_str(), delivered.target.as_str()), ("POST", "/api/payments?v=2"));
        assert_eq!(delivered.text(), r#"{"amount":100}"#);
        assert_eq!(applied.lock().unwrap()[key.as_str()], 1, "the payment took effect once");
    }

    #[tokio::test]
    async fn an_open_breaker_defers_the_write_to_when_a_delivery_may_probe() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let server = gateway(Arc::new(Mutex::new(false)), Arc::default()).await;
        let breaker = Breaker::consecutive(1).half_open_after(Duration::from_secs(60));
        let sber =
            system("sber", &server, policy("sber").breaker(breaker)).dedupes_by_key(true).build().unwrap();
        let key = IdempotencyKey::v5("order-43", "register-payment");

        let handover = sber.write_or_defer(&key, &queue, Request::post("payments")).await;

        let Ok(Handover::Deferred { task_id: deferred, .. }) = handover else { panic!("deferred") };
        assert_eq!(server.count(), 1, "the breaker opened after the first failure");
        let task = queue.get(deferred).await.unwrap().unwrap();
        // Due when the breaker lets a delivery probe — 2 s after it opened,
        // not its 60 s half_open_after, nor at once.
        let wait = task.run_at.duration_since(std::time::SystemTime::now()).unwrap();
        let probe = ballast::breaker::BACKGROUND_PROBE_AFTER;
        assert!(wait > probe / 2 && wait <= probe, "due when a delivery may probe: {wait:?}");
    }

    #[tokio::test]
    async fn writes_to_a_system_that_does_not_dedupe_and_4xx_answers_are_not_deferred() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let up = Arc::new(Mutex::new(false));
        let server = gateway(up.clone(), Arc::default()).await;
        let crm = system("crm", &server, policy("crm")).build().unwrap();
        let key = IdempotencyKey::v5("lead-7", "create");

        // The answers come back as answers: neither is deferred.
        let Ok(Handover::Done(answer)) = crm.write_or_defer(&key, &queue, Request::post("leads")).await
        else {
            panic!("a write to a system that does not dedupe by key is never deferred (R-RES-RE-1)");
        };
        assert_eq!(answer.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.verdict().is_some_and(|v| v.is_transient()));
        assert_eq!(server.count(), 1);

        *up.lock().unwrap() = true;
        let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();
        let Ok(Handover::Done(answer)) = sber.write_or_defer(&key, &queue, Request::post("refused")).await
        else {
            panic!("a contract error is never deferred (R-RES-RE-X2)");
        };
        assert_eq!(answer.status(), http::StatusCode::UNPROCESSABLE_ENTITY);
        assert!(answer.verdict().is_some_and(|v| !v.is_transient()), "a contract error: {answer:?}");
        assert_eq!(server.count(), 2);
        assert!(tasks(&queue).await.is_empty());
    }

    /// A delivery stored when every system's deliveries shared one kind
    /// (before R2's fix) is its own system's alone: that system's same
    /// request joins it, another system's request with the same key is
    /// that system's own write, and a worker runs both kinds.
    #[tokio::test]
    async fn a_delivery_stored_under_the_shared_kind_is_its_system_s_alone() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let up = Arc::new(Mutex::new(false));
        let applied: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let server = gateway(Arc::clone(&up), Arc::clone(&applied)).await;
        let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();
        let crm = system("crm", &server, policy("crm")).dedupes_by_key(true).build().unwrap();
        let key = IdempotencyKey::v5("order-46", "register-payment");
        let pay = || Request::post("payments").json(&serde_json::json!({ "amount": 100 }));
        let mut stored = sber.capture(&key, &pay()).unwrap();
        stored.fingerprint = Some(ballast_http::Fingerprint::of(&pay()));
        let legacy = queue.enqueue(NewTask::new(DELIVERY_KIND, &stored).key(key.clone())).await.unwrap().id;

        let joined = sber.write_or_defer(&key, &queue, pay()).await.unwrap();
        assert!(matches!(joined, Handover::Deferred { task_id, .. } if task_id == legacy), "{joined:?}");
        assert_eq!(server.count(), 0, "joined: nothing sent");
        let own = crm.write_or_defer(&key, &queue, pay()).await.unwrap();
        let Handover::Deferred { task_id: crm_task, .. } = own else { panic!("crm is down too: {own:?}") };
        assert_ne!(crm_task, legacy, "crm's write is its own task");
        assert!(server.count() > 0, "crm's write was tried");

        *up.lock().unwrap() = true;
        let done = work_off(&queue, DeliveryHandler::new([sber, crm])).await;
        assert!(done.iter().all(|t| t.state == TaskState::Completed), "{done:#?}");
        let kinds: Vec<_> = done.iter().map(|t| t.kind.as_str()).collect();
        assert_eq!(kinds, [DELIVERY_KIND, "ballast.http.delivery/crm"]);
    }

    #[tokio::test]
    async fn deliveries_that_cannot_succeed_fail_at_once_and_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let server = gateway(Arc::new(Mutex::new(true)), Arc::default()).await;
        let sber = system("sber", &server, policy("sber")).dedupes_by_key(true).build().unwrap();
        let key = IdempotencyKey::v5("order-44", "register-payment");
        let delivery =
            |system: &str, path: &str| Delivery::from_request(system, &Request::post(path)).unwrap();
        queue.enqueue(delivery("sber", "refused").task(&key)).await.unwrap();
        queue.enqueue(NewTask::new(DELIVERY_KIND, &delivery("sber", "payments"))).await.unwrap();
        let mut escaping = delivery("sber", "payments");
        escaping.path = "pay/%2e%2e/%2E%2E/admin/refund".into();
        queue.enqueue(escaping.task(&IdempotencyKey::v5("order-44", "refund"))).await.unwrap();

        let done = work_off(&queue, DeliveryHandler::new([sber])).await;

        assert!(done.iter().all(|t| t.state == TaskState::Failed && t.attempt == 1), "{done:#?}");
        let errors: Vec<_> = done.iter().map(|t| t.last_error.clone().unwrap_or_default()).collect();
        assert!(errors[0].contains("422") && errors[0].contains("R-RES-RE-X2"), "{}", errors[0]);
        assert!(
            errors[1].contains("no idempotency key") && errors[1].contains("R-RES-RE-X1"),
            "{}",
            errors[1]
        );
        assert!(errors[2].contains("`..` segment") && errors[2].contains("not sent"), "{}", errors[2]);
        assert_eq!(server.count(), 1, "only the refused delivery reached the server");
    }

    /// A delivery whose system is not configured (a reload removed it) is
    /// held, its attempt not counted, and delivered once the system returns.
    #[tokio::test]
    async fn a_delivery_to_an_unknown_system_is_held_not_failed() {
        let (_dir, queue) = queue_of_attempts(1).await;
        let applied = Arc::default();
        let server = gateway(Arc::new(Mutex::new(true)), Arc::clone(&applied)).await;
        let key = IdempotencyKey::v5("order-45", "send-sms");
        let id = queue.enqueue(Delivery::from_request("sms", &Request::post("messages")).unwrap().task(&key));
        let id = id.await.unwrap().id;
        let systems = ballast_http::Systems::new([]);

        let held =
            work_until(&queue, DeliveryHandler::shared(systems.clone()), |t| t[0].last_error.is_some()).await;
        let task = &held[0];
        assert_eq!((task.state, task.attempt, task.max_attempts), (TaskState::Pending, 0, 1), "{task:#?}");
        assert!(task.last_error.as_deref().unwrap().contains("unknown system \"sms\""), "{task:#?}");
        let wait = task.run_at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
        assert!(wait > Duration::from_secs(20), "held for a while, not retried at once: {wait:?}");

        systems.replace([system("sms", &server, policy("sms")).dedupes_by_key(true).build().unwrap()]);
        queue.run_now(id).await.unwrap();
        let done = work_off(&queue, DeliveryHandler::shared(systems)).await;
        assert_eq!((done[0].state, done[0].attempt), (TaskState::Completed, 1));
        assert_eq!(applied.lock().unwrap()[key.as_str()], 1);
    }

    /// While the breaker refuses, a delivery is postponed again and again
    /// without spending its attempts: once the system is back, the one
    /// attempt it has goes through.
    #[tokio::test]
    async fn refusals_before_anything_is_sent_do_not_use_up_attempts() {
        let (_dir, queue) = queue_of_attempts(2).await;
        let applied = Arc::default();
        let server = gateway(Arc::new(Mutex::new(true)), Arc::clone(&applied)).await;
        let sber = system("sber", &server, policy("sber").breaker(Breaker::consecutive(3)))
            .dedupes_by_key(true)
            .key_ttl(Duration::from_secs(3600))
            .build()
            .unwrap();
        sber.policy().breaker().unwrap().isolate();
        let key = IdempotencyKey::v5("order-46", "register-payment");
        queue
            .enqueue(Delivery::from_request("sber", &Request::post("payments")).unwrap().task(&key))
            .await
            .unwrap();

        let refused =
            work_until(&queue, DeliveryHandler::new([sber.clone()]), |t| t[0].errors.len() >= 5).await;
        let task = &refused[0];
        assert_eq!((task.state, task.attempt), (TaskState::Pending, 0), "{task:#?}");
        assert!(task.errors.len() >= 5, "refused 5 times, more than its 2 attempts: {task:#?}");
        assert!(task.errors.iter().all(|e| e.error.contains("isolated")), "{task:#?}");
        assert_eq!(server.count(), 0, "nothing reached the system");

        sber.policy().breaker().unwrap().reset();
        let done = work_off(&queue, DeliveryHandler::new([sber])).await;
        assert_eq!((done[0].state, done[0].attempt), (TaskState::Completed, 1), "{:#?}", done[0]);
        assert_eq!((server.count(), applied.lock().unwrap()[key.as_str()]), (1, 1));
    }

    /// A delivery is never sent once its key may have expired (the system's
    /// key_ttl) or, for a system without one, once it is older than max_age:
    /// it fails, unsent, and says why.
    #[tokio::test]
    async fn a_delivery_past_its_key_ttl_or_max_age_fails_unsent() {
        let dir = tempfile::tempdir().unwrap();
        let queue = queue(&dir).await;
        let server = gateway(Arc::new(Mutex::new(true)), Arc::default()).await;
        let sber = system("sber", &server, policy("sber"))
            .dedupes_by_key(true)
            .key_ttl(Duration::from_secs(3600))
            .build()
            .unwrap();
        let crm = system("crm", &server, policy("crm")).dedupes_by_key(true).build().unwrap();
        let two_hours_ago = now_millis() - 2 * 3600 * 1000;
        for (system, operation) in [("sber", "register-payment"), ("crm", "create-lead")] {
            let mut old = Delivery::from_request(system, &Request::post("payments")).unwrap();
            old.first_attempt_at = Some(two_hours_ago);
            queue.enqueue(old.task(&IdempotencyKey::v5("order-47", operation))).await.unwrap();
        }

        let done =
            work_off(&queue, DeliveryHandler::new([sber, crm]).max_age(Duration::from_secs(3600))).await;

        assert!(done.iter().all(|t| t.state == TaskState::Failed), "{done:#?}");
        let errors: Vec<_> = done.iter().map(|t| t.last_error.clone().unwrap_or_default()).collect();
        assert!(errors[0].contains("may have expired") && errors[0].contains("R-RES-RE-1"), "{}", errors[0]);
        assert!(errors[1].contains("max_age"), "{}", errors[1]);
        assert_eq!(server.count(), 0, "neither was sent");
    }

    fn now_millis() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    }
}

/// A client of the caller's own: its default headers and user agent reach
/// the server on every attempt, beside the key ballast adds.
#[tokio::test]
async fn an_own_client_keeps_its_default_headers_on_every_attempt() {
    use reqwest::header::{HeaderMap, HeaderValue};
    let server =
        Upstream::start(|_, n| if n % 2 == 1 { Reply::status(503) } else { Reply::body(200, "ok") }).await;
    let mut headers = HeaderMap::new();
    headers.insert("x-team", HeaderValue::from_static("billing"));
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .user_agent("billing/1.4")
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let crm = HttpSystem::builder("crm", &server.url("/api/"))
        .client(client)
        .policy(|_| policy("crm"))
        .dedupes_by_key(true)
        .build()
        .unwrap();

    let read = crm.read(Request::get("orders/7")).await.unwrap();
    let key = IdempotencyKey::v5("order-7", "note");
    let written = crm.write(&key, Request::post("notes").body("hi")).await.unwrap();

    assert_eq!((read.attempts(), written.attempts()), (2, 2));
    let seen = server.requests();
    assert_eq!(seen.len(), 4);
    for s in &seen {
        assert_eq!(s.header("x-team"), Some("billing"), "{s:?}");
        assert_eq!(s.header("user-agent"), Some("billing/1.4"), "{s:?}");
    }
    assert_eq!(seen[2].key(), Some(key.as_str()));
    assert_eq!(seen[3].key(), Some(key.as_str()));

    for refused in [
        HttpSystem::builder("crm", &server.url("/api/"))
            .client(reqwest::Client::new())
            .connect_timeout(ms(100)),
        HttpSystem::builder("crm", &server.url("/api/")).client(reqwest::Client::new()).read_timeout(ms(100)),
    ] {
        let err = refused.build().unwrap_err().to_string();
        assert!(err.contains("client of your own") && err.contains("timeout"), "{err}");
    }
}

#[tokio::test]
async fn a_path_is_appended_to_the_base_path_with_or_without_slashes() {
    let server = Upstream::start(|_, _| Reply::status(200)).await;
    for base in ["api/v2", "api/v2/"] {
        let sys = HttpSystem::builder("crm", &format!("http://{}/{base}", server.addr)).build().unwrap();
        for path in ["orders/7", "/orders/7"] {
            sys.read(Request::get(path).query(&[("expand", "items")])).await.unwrap();
        }
    }
    let sys = HttpSystem::builder("crm", &server.url("/api/")).build().unwrap();
    sys.read(Request::get("odd?name")).await.unwrap();
    let paths: Vec<String> = server.requests().into_iter().map(|s| s.target).collect();
    assert_eq!(paths[..4], ["/api/v2/orders/7?expand=items"; 4]);
    assert_eq!(paths[4], "/api/odd%3Fname", "a ? in the path is part of the path");
}

#[tokio::test]
async fn a_body_that_is_not_the_json_expected_fails_the_call_in_its_own_error_type() {
    #[derive(Debug, serde::Deserialize)]
    struct Order {
        #[allow(dead_code)]
        id: u64,
    }
    let server = Upstream::start(|_, _| Reply::body(200, "<html>maintenance</html>")).await;
    let crm = HttpSystem::builder("crm", &server.url("/api/")).build().unwrap();
    let order = async { crm.read(Request::get("orders/7")).await?.json::<Order>() }.await;
    let failure = order.unwrap_err();
    assert_eq!((failure.stop_reason(), failure.attempts()), (StopReason::Permanent, 1));
    assert!(matches!(failure.error(), Some(HttpError::Decode { .. })), "{failure:?}");
    assert!(failure.to_string().contains("not the JSON expected"), "{failure}");
}

#[tokio::test]
async fn a_failure_reads_as_one_sentence() {
    let refusing = ballast_test_support::Refusing::new();
    let closed = refusing.addr;
    let down =
        HttpSystem::builder("down", &format!("http://{closed}/")).policy(|_| policy("down")).build().unwrap();
    let failure = down.read(Request::get("x")).await.unwrap_err().to_string();
    assert_eq!(failure.matches("transient").count(), 1, "{failure}");
    let server = Upstream::start(|_, _| Reply::status(404)).await;
    let crm = HttpSystem::builder("crm", &server.url("/api/")).build().unwrap();
    let failure = crm.read(Request::get("x")).await.unwrap_err().to_string();
    assert_eq!(failure.matches("R-RES-RE-X2").count(), 1, "{failure}");
}

/// N1: a panic inside an attempt (here, the transport's) is an unknown
/// outcome, never a failed write: a read is tried again, a write sent once
/// reports that its request may have been applied.
#[tokio::test(start_paused = true)]
async fn a_panicking_attempt_is_an_unknown_outcome() {
    let calls = Arc::new(Mutex::new(0u32));
    let counted = Arc::clone(&calls);
    let transport = tower::service_fn(move |_: http::Request<ballast_http::transport::OutBody>| {
        let n = {
            let mut calls = counted.lock().unwrap();
            *calls += 1;
            *calls
        };
        async move {
            if n == 1 {
                panic!("cannot convert float seconds to Duration");
            }
            Ok::<_, ballast_http::transport::TransportError>(http::Response::new(bytes::Bytes::from_static(
                b"{}",
            )))
        }
    });
    let crm = HttpSystem::builder("crm", "http://crm.test/")
        .policy(|_| policy("crm"))
        .transport(transport)
        .build()
        .unwrap();
    let answer = crm.read(Request::get("leads/7")).await.unwrap();
    assert_eq!((answer.status().as_u16(), answer.attempts()), (200, 2), "the read was tried again");

    *calls.lock().unwrap() = 0;
    let failure = crm.write_once(Request::post("leads")).await.unwrap_err();
    let error = failure.error().unwrap();
    assert!(matches!(error, HttpError::Panicked { .. }), "{failure}");
    assert!(ballast::Classify::classify(error).is_transient(), "unknown, like a reset connection");
    assert!(!error.nothing_sent() && failure.to_string().contains("may have been applied"), "{failure}");
    assert_eq!(*calls.lock().unwrap(), 1, "a write sent once is not tried again");
}
