//! The outbound gateway end to end: a real `ballast serve` (in-process), a
//! real upstream, requests from a plain HTTP client — as a service in any
//! language would send them.

mod support;

use std::ops::RangeInclusive;
use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_test_support::{eventually, send, Reply, Upstream};
use serde_json::Value;
use support::{client, serve, Served};

const SYSTEMS: &str = include_str!("configs/gateway.toml");

fn attempts(response: &reqwest::Response) -> Option<u32> {
    response.headers().get("ballast-attempts")?.to_str().ok()?.parse().ok()
}

async fn problem(response: reqwest::Response) -> Value {
    let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert_eq!(kind, "application/problem+json");
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_retried_and_the_upstream_answer_comes_back_unchanged() {
    let upstream = Upstream::start(|_, n| match n {
        1 => Reply::body(503, "busy"),
        _ => Reply::body(200, "hello").header("x-up", "1"),
    })
    .await;
    let served = serve(&upstream, SYSTEMS).await;

    let response = send(
        client().get(format!("{}/call/pay/orders/7?expand=items&x=%20y", served.gateway)),
        &[("x-request-id", "r-1"), ("connection", "x-hop"), ("x-hop", "1")],
    )
    .await;

    assert_eq!((response.status().as_u16(), attempts(&response)), (200, Some(2)));
    assert_eq!(response.headers()["x-up"], "1");
    assert_eq!(response.text().await.unwrap(), "hello");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!((s.method.as_str(), s.target.as_str()), ("GET", "/v1/orders/7?expand=items&x=%20y"));
        assert_eq!(s.header("x-request-id"), Some("r-1"));
        assert!(!s.headers.contains_key("x-hop"), "hop-by-hop headers stay behind: {s:?}");
        assert_eq!(s.header("host"), Some(upstream.addr.to_string().as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_is_the_upstreams_answer_and_is_not_retried() {
    let upstream = Upstream::start(|_, _| Reply::body(404, "no such order").header("x-reason", "gone")).await;
    let served = serve(&upstream, SYSTEMS).await;
    let response = served.read("pay/orders/8").await;
    assert_eq!((response.status().as_u16(), attempts(&response)), (404, Some(1)));
    assert_eq!(response.headers()["x-reason"], "gone");
    assert_eq!(response.text().await.unwrap(), "no such order");
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unkeyed_post_reaches_the_upstream_once_when_its_answer_is_lost() {
    let upstream = Upstream::start(|_, _| Reply::Lost).await;
    let served = serve(&upstream, SYSTEMS).await;
    let response = send(
        client().post(format!("{}/call/pay/payments", served.gateway)).body(r#"{"amount":100}"#),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!((response.status().as_u16(), attempts(&response)), (502, Some(1)));
    let problem = problem(response).await;
    assert_eq!(problem["ballast"]["reason"], "transport");
    assert_eq!(problem["ballast"]["rule"], "R-RES-RE-X1");
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1, "sent exactly once");
    assert_eq!((seen[0].method.as_str(), &seen[0].body[..]), ("POST", &br#"{"amount":100}"#[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_post_is_retried_with_its_key_under_the_systems_header() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let served = serve(&upstream, SYSTEMS).await;
    let key = IdempotencyKey::v5("order-1", "pay");
    let response = send(
        client().post(format!("{}/call/pay/payments", served.gateway)).body("100"),
        &[("Idempotency-Key", key.as_str())],
    )
    .await;
    assert_eq!((response.status().as_u16(), attempts(&response)), (503, Some(3)));
    let seen = upstream.requests();
    assert_eq!(seen.len(), 3, "max_attempts");
    for s in &seen {
        assert_eq!(s.header("x-idem-key"), Some(key.as_str()));
        assert!(!s.headers.contains_key("idempotency-key"), "{s:?}");
    }

    // crm does not deduplicate by key: the key goes along, the write goes once.
    let once = send(
        client().post(format!("{}/call/crm/notes", served.gateway)),
        &[("Idempotency-Key", key.as_str())],
    )
    .await;
    assert_eq!((once.status().as_u16(), attempts(&once)), (503, Some(1)));
    let seen = upstream.requests();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[3].key(), Some(key.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_unknown_systems_and_large_bodies_are_refused_unsent() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = serve(&upstream, SYSTEMS).await;
    let gateway = &served.gateway;

    let bad =
        client().post(format!("{gateway}/call/pay/p")).header("Idempotency-Key", "two words").send().await;
    let bad = bad.unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let bad = problem(bad).await;
    assert_eq!(
        (bad["ballast"]["reason"].as_str(), bad["ballast"]["rule"].as_str()),
        (Some("bad_key"), Some("R-RES-RE-1"))
    );

    let unknown = client().get(format!("{gateway}/call/nope/x")).send().await.unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    let unknown = problem(unknown).await;
    assert_eq!(unknown["ballast"]["reason"], "unknown_system");
    assert!(unknown["detail"].as_str().unwrap().contains("crm, pay"), "{unknown}");

    let large = client().post(format!("{gateway}/call/pay/p")).body(vec![b'x'; 2048]).send().await.unwrap();
    assert_eq!(large.status().as_u16(), 413);
    assert_eq!(problem(large).await["ballast"]["reason"], "too_large");
    assert!(upstream.requests().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_write_completes_after_the_outage_and_its_task_says_so() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let served = serve(&upstream, SYSTEMS).await;
    let key = IdempotencyKey::v5("order-2", "pay");
    let response = served.defer("pay/payments", key.as_str(), "100").await;
    assert_eq!((response.status().as_u16(), attempts(&response)), (202, Some(3)));
    assert_eq!(response.headers()["preference-applied"], "respond-async");
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["state"], "pending");
    assert_eq!(body["deferred_because"], "attempts_exhausted", "{body}");
    assert!(body["next_attempt_at"].as_f64().is_some() && retry_after <= 60, "{body}");
    let handle = body["task_id"].as_str().expect("the task's handle").to_owned();
    assert_eq!(location, format!("/tasks/{handle}"));
    // The handle, not the task's sequential id, names it.
    let (id, secret) = handle.split_once('.').expect("id.secret");
    assert!(secret.len() >= 32, "{handle}");
    for guess in [
        id.to_owned(),
        format!("{id}.{}", "0".repeat(secret.len())),
        format!("{}.{secret}", id.parse::<i64>().unwrap() + 1),
    ] {
        let guessed = client().get(format!("{}/tasks/{guess}", served.gateway)).send().await.unwrap();
        assert_eq!(guessed.status().as_u16(), 404, "{guess}");
    }

    let task_url = format!("{}{location}", served.gateway);
    let task: Value = client().get(&task_url).send().await.unwrap().json().await.unwrap();
    assert_eq!(task["system"], "pay");
    assert!(["pending", "running"].contains(&task["state"].as_str().unwrap()), "{task}");

    assert_eq!(task["deferred_because"], "attempts_exhausted", "{task}");
    let bad = client().get(format!("{task_url}?wait=soon")).send().await.unwrap();
    assert_eq!(
        (bad.status().as_u16(), problem(bad).await["ballast"]["reason"].clone()),
        (400, "bad_request".into())
    );

    upstream.rescript(|_, _| {
        Reply::body(201, r#"{"payment_id":"pay_7"}"#).header("content-type", "application/json")
    });
    // The caller waits for the end instead of polling: one request, held
    // until the worker delivers it (its next attempt is a backoff away).
    let waited = client().get(format!("{task_url}?wait=30s")).send().await.unwrap();
    assert_eq!(waited.status().as_u16(), 200);
    let task: Value = waited.json().await.unwrap();
    assert_eq!(task["state"], "completed", "the wait ends with the task: {task}");
    assert_eq!(task["result"]["status"], 201, "the upstream's final answer is kept: {task}");
    assert_eq!(task["result"]["headers"]["content-type"], "application/json", "{task}");
    let answer: Value = serde_json::from_str(task["result"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(answer["payment_id"], "pay_7", "the payment's id, without sending the write again: {task}");
    assert_eq!(task["next_attempt_at"], Value::Null);
    let seen = upstream.requests();
    assert!(seen.len() >= 4, "3 in memory, then the worker's: {}", seen.len());
    assert!(seen.iter().all(|s| s.header("x-idem-key") == Some(key.as_str())));

    let missing = client().get(format!("{}/tasks/999999", served.gateway)).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
}

/// Reads `sms/status` twice: the first answers `first`, the second is
/// refused unsent (503, no attempt) for `reason`, to be tried again after
/// a number of seconds within `wait`.
async fn refused_after_one(served: &Served, first: u16, reason: &str, wait: RangeInclusive<u64>) {
    assert_eq!(served.read("sms/status").await.status().as_u16(), first);
    let refused = served.read("sms/status").await;
    assert_eq!((refused.status().as_u16(), attempts(&refused)), (503, Some(0)));
    let after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait.contains(&after), "Retry-After: {after}, not within {wait:?}");
    let body = problem(refused).await;
    assert_eq!(body["ballast"]["reason"], reason, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_answers_503_with_retry_after_and_sends_nothing() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let served = serve(&upstream, include_str!("configs/open_breaker.toml")).await;
    refused_after_one(&served, 503, "breaker_open", 1..=60).await;
    assert_eq!(upstream.requests().len(), 1);
}

/// A system's rate limit refuses the attempt past it unsent: 503
/// `rate_limited` with the wait until the next permit; a keyed write whose
/// caller asked is deferred instead, due when a permit frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_permit_answers_503_rate_limited_or_defers() {
    let upstream = Upstream::start(|_, _| Reply::body(200, "ok")).await;
    let served = serve(&upstream, include_str!("configs/rate_limited.toml")).await;
    // The next permit comes a minute after the first.
    refused_after_one(&served, 200, "rate_limited", 55..=60).await;

    let deferred = served.defer("sms/messages", IdempotencyKey::v5("sms-3", "send").as_str(), "hi").await;
    assert_eq!((deferred.status().as_u16(), attempts(&deferred)), (202, Some(0)));
    let location = deferred.headers()["location"].to_str().unwrap().to_owned();
    let task: Value =
        client().get(format!("{}{location}", served.gateway)).send().await.unwrap().json().await.unwrap();
    assert_eq!(task["state"], "pending", "{task}");
    assert_eq!(upstream.requests().len(), 1, "nothing past the limit was sent");
    let metrics =
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ballast_rate_limited_total{system=\"sms\"} 2"), "{metrics}");
    assert!(metrics.contains("ballast_rate_limit_permits_per_second{system=\"sms\"} 0.01666"), "{metrics}");
}

/// The routes `ballast openapi import` makes of the payment API of
/// `ballast-cli`'s tests: the search is retried as a read although it is a
/// POST, the payment without a key is refused unsent, the PATCH goes once;
/// every answer names its route, never the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_declare_what_each_endpoint_is() {
    let upstream = Upstream::start(|seen, n| match (seen.method.as_str(), n) {
        ("POST", 1) => Reply::body(503, "busy"),
        ("POST", _) => Reply::body(200, "[]"),
        _ => Reply::body(503, "busy"),
    })
    .await;
    let served = serve(&upstream, include_str!("configs/routes.toml")).await;
    let search = client()
        .post(format!("{}/call/pay/payments/search", served.gateway))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!((search.status().as_u16(), attempts(&search)), (200, Some(2)), "retried as a read");
    assert_eq!(search.headers()["ballast-route"], "POST /payments/search");

    let unkeyed =
        client().post(format!("{}/call/pay/payments", served.gateway)).body("{}").send().await.unwrap();
    assert_eq!((unkeyed.status().as_u16(), attempts(&unkeyed)), (400, Some(0)));
    assert_eq!(unkeyed.headers()["ballast-route"], "POST /payments");
    let body = problem(unkeyed).await;
    assert_eq!(body["ballast"]["reason"], "key_required", "{body}");
    assert_eq!(body["ballast"]["rule"], "R-RES-RE-1");
    assert_eq!(body["ballast"]["route"], "POST /payments");
    assert!(body["detail"].as_str().unwrap().contains("POST /payments is declared keyed_write"), "{body}");

    let patch = send(
        client().patch(format!("{}/call/pay/payments/p-77", served.gateway)).body("{}"),
        &[("Idempotency-Key", IdempotencyKey::v5("p-77", "describe").as_str())],
    )
    .await;
    assert_eq!((patch.status().as_u16(), attempts(&patch)), (503, Some(1)), "sent once, key or not");
    assert_eq!(patch.headers()["ballast-route"], "PATCH /payments/{id}");

    let methods: Vec<(String, String)> =
        upstream.requests().iter().map(|s| (s.method.to_string(), s.target.clone())).collect();
    assert_eq!(
        methods,
        [
            ("POST".to_owned(), "/v2/payments/search".to_owned()),
            ("POST".to_owned(), "/v2/payments/search".to_owned()),
            ("PATCH".to_owned(), "/v2/payments/p-77".to_owned()),
        ],
        "the payment without a key never left"
    );
    let metrics =
        client().get(format!("{}/metrics", served.admin)).send().await.unwrap().text().await.unwrap();
    for line in [
        "ballast_route_calls_total{system=\"pay\",route=\"POST /payments/search\",outcome=\"ok\"} 1",
        "ballast_route_calls_total{system=\"pay\",route=\"POST /payments\",outcome=\"unanswered\"} 1",
        "ballast_route_calls_total{system=\"pay\",route=\"PATCH /payments/{id}\",outcome=\"failed\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(!metrics.contains("p-77"), "no raw path in the metrics");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_only_requests_that_bring_it_pass_and_it_goes_no_further() {
    std::env::set_var("BALLAST_GATEWAY_TEST_TOKEN", "s3cret-gateway-token");
    let upstream = Upstream::start(|_, _| Reply::body(200, "ok")).await;
    let systems = r#"
[gateway]
listen = "127.0.0.1:0"
token_env = "BALLAST_GATEWAY_TEST_TOKEN"

[systems.crm]
base_url = "http://{upstream}/"
"#;
    let served = serve(&upstream, systems).await;
    let url = format!("{}/call/crm/x", served.gateway);
    let refused = client().get(&url).send().await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(problem(refused).await["ballast"]["reason"], "unauthorized");
    let wrong = client().get(&url).bearer_auth("s3cret-tokeX").send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let admitted = client().get(&url).bearer_auth("s3cret-gateway-token").send().await.unwrap();
    assert_eq!(admitted.status().as_u16(), 200);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].headers.contains_key("authorization"), "the gateway's token stays at the gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_a_gateway_without_a_usable_token_does_not_start() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    for (gateway, says) in [
        ("listen = \"0.0.0.0:0\"", "without a token"),
        ("listen = \"0.0.0.0:0\"\ntoken_env = \"BALLAST_GATEWAY_TEST_UNSET\"", "not set"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[queue]\nurl = \"sqlite://{}\"\n[serve]\nlisten = \"127.0.0.1:0\"\n[gateway]\n{gateway}\n[systems.crm]\nbase_url = \"http://{}/\"\n",
            dir.path().join("q.db").display(),
            upstream.addr
        );
        let config = ballast_config::Config::parse("t.toml", text).unwrap();
        let err = ballast_server::Server::bind(&config, support::prometheus(), None).await.unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_unchanged_systems_running_and_refuses_a_bad_file() {
    let upstream = Upstream::start(|seen, _| {
        if seen.target.starts_with("/slow") {
            Reply::body(200, "slow").after(Duration::from_millis(600))
        } else {
            Reply::body(503, "down")
        }
    })
    .await;
    let served = serve(&upstream, include_str!("configs/reload.toml")).await;
    let path = served.dir.path().join("ballast.toml");
    let config = ballast_config::Config::load(&path).unwrap();
    served.read("sms/x").await;
    let sms = served.systems.get("sms").unwrap();
    assert_eq!(sms.breaker_state(), Some(ballast::BreakerState::Open));

    // A call in flight on crm while crm is rebuilt.
    let in_flight = tokio::spawn(client().get(format!("{}/call/crm/slow", served.gateway)).send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let changed = std::fs::read_to_string(&path).unwrap() + "\n[systems.crm.retry]\nmax_attempts = 2\n";
    std::fs::write(&path, changed).unwrap();
    let (config, done) =
        ballast_server::reload::reload(&path, &config, &served.systems, &served.queue).await.unwrap();
    assert_eq!((done.kept, done.rebuilt), (vec!["sms".to_owned()], vec!["crm".to_owned()]));
    assert_eq!(served.systems.get("sms").unwrap().breaker_state(), Some(ballast::BreakerState::Open));
    assert_eq!(served.systems.get("crm").unwrap().policy().retry().max_attempts(), 2);
    let slow = in_flight.await.unwrap().unwrap();
    assert_eq!(slow.status().as_u16(), 200, "the call in flight finished on the system it started with");

    std::fs::write(&path, "[systems.crm.retry]\nmax_attempts = 9\n").unwrap();
    let refused =
        ballast_server::reload::reload(&path, &config, &served.systems, &served.queue).await.unwrap_err();
    assert!(refused.to_string().contains("R-RES-RE-3"), "{refused}");
    assert_eq!(served.systems.names(), ["crm", "sms"], "the running systems stay");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferrable_write_goes_on_when_its_caller_hangs_up() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down").after(Duration::from_millis(200))).await;
    let served = serve(&upstream, SYSTEMS).await;
    let key = IdempotencyKey::v5("order-3", "pay");
    let call = client()
        .post(format!("{}/call/pay/payments", served.gateway))
        .header("Idempotency-Key", key.as_str())
        .header("Prefer", "respond-async")
        .body("100")
        .send();
    // The caller hangs up once the write is at the system, well inside the
    // gateway's in-memory attempts, however slow the machine.
    let at_the_system = async {
        while upstream.count() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        answered = call => panic!("the caller was to hang up before the answer: {answered:?}"),
        () = at_the_system => {}
    }
    eventually("the write is deferred all the same", || async {
        served.queue.list(&ballast_queue::ListFilter::default()).await.unwrap().len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_own_answers_say_so_and_say_whether_anything_was_sent() {
    let refusing = ballast_test_support::Refusing::new();
    let closed = refusing.addr;
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let systems =
        format!("[gateway]\nlisten = \"127.0.0.1:0\"\n\n[systems.gone]\nbase_url = \"http://{closed}/\"\n");
    let served = serve(&upstream, &systems).await;
    let response = client().post(format!("{}/call/gone/x", served.gateway)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 502);
    assert_eq!(response.headers()["ballast-problem"], "transport");
    assert!(response.headers()["keep-alive"].to_str().unwrap().starts_with("timeout="));
    let problem = problem(response).await;
    assert_eq!(problem["ballast"]["sent"], false, "a refused connection sent nothing: {problem}");
}

/// A write the gateway defers keeps its caller's trace context: the
/// delivery, later, carries the caller's trace id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_write_keeps_its_caller_s_trace() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let served = serve(&upstream, SYSTEMS).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let deferred = send(
        client().post(format!("{}/call/pay/payments", served.gateway)).body("100"),
        &[
            ("Idempotency-Key", IdempotencyKey::v5("order-8", "pay").as_str()),
            ("Prefer", "respond-async"),
            ("traceparent", &format!("00-{trace}-00f067aa0ba902b7-01")),
        ],
    )
    .await;
    assert_eq!(deferred.status().as_u16(), 202);
    let before = upstream.requests().len();
    upstream.rescript(|_, _| Reply::body(201, "paid"));
    eventually("the deferred write is delivered", || async { upstream.requests().len() > before }).await;
    let delivered = upstream.requests().pop().unwrap();
    let parent = delivered.header("traceparent").unwrap_or_default().to_owned();
    assert!(parent.contains(trace), "the delivery continues the caller's trace: {parent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_write_calls_back_signed_when_it_is_delivered_and_only_to_listed_hosts() {
    let upstream = Upstream::start(|_, n| match n {
        1..=3 => Reply::body(503, "down"),
        _ => Reply::body(201, r#"{"payment_id":"pay_9"}"#).header("content-type", "application/json"),
    })
    .await;
    let receiver = Upstream::start(|_, _| Reply::status(204)).await;
    std::env::set_var("GATEWAY_TEST_CALLBACK_SECRET", "callback-secret-0123456789");
    let config = SYSTEMS.replace(
        "max_body = \"1KiB\"",
        &format!(
            "max_body = \"1KiB\"\ncallback_hosts = [\"{}\"]\ncallback_secret_env = \"GATEWAY_TEST_CALLBACK_SECRET\"",
            receiver.addr
        ),
    );
    let served = serve(&upstream, &config).await;
    let key = IdempotencyKey::v5("order-9", "pay");
    let deferring = |callback: String| {
        client()
            .post(format!("{}/call/pay/payments", served.gateway))
            .header("idempotency-key", key.as_str())
            .header("prefer", "respond-async")
            .header("ballast-callback", callback)
            .body("100")
    };

    // A caller may not aim the gateway at an address the operator did not list.
    for elsewhere in ["http://169.254.169.254/latest/meta-data", "http://127.0.0.1:1/x", "file:///etc/passwd"]
    {
        let refused = deferring(elsewhere.to_owned()).send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 400, "{elsewhere}");
        assert_eq!(problem(refused).await["ballast"]["reason"], "bad_callback", "{elsewhere}");
    }
    assert!(upstream.requests().is_empty(), "refused unsent");

    let callback_url = format!("http://{}/hooks/payments?token=t0k3n", receiver.addr);
    let deferred = deferring(callback_url).send().await.unwrap();
    assert_eq!(deferred.status().as_u16(), 202);
    let handle = deferred.json::<Value>().await.unwrap()["task_id"].as_str().unwrap().to_owned();

    eventually("the callback arrives", || async { !receiver.requests().is_empty() }).await;
    let seen = receiver.requests();
    let call = &seen[0];
    assert_eq!((call.method.as_str(), call.target.as_str()), ("POST", "/hooks/payments?token=t0k3n"));
    assert_eq!(call.header("ballast-task"), Some(handle.as_str()));
    assert!(call.header("ballast-delivery").is_some_and(|d| Some(d) == call.header("idempotency-key")));
    let policy = ballast_http::delivery::CallbackPolicy::new(
        [receiver.addr.to_string()],
        b"callback-secret-0123456789".to_vec(),
    );
    let signature = call.header("ballast-signature").unwrap();
    let now = std::time::SystemTime::now();
    assert!(policy.verify(signature, &call.body, now, Duration::from_secs(300)), "signed: {signature}");
    let forged = ballast_http::delivery::CallbackPolicy::new(
        [receiver.addr.to_string()],
        b"not the secret!!".to_vec(),
    );
    assert!(!forged.verify(signature, &call.body, now, Duration::from_secs(300)));
    let event: Value = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["task"]["state"].as_str()),
        (Some("task.completed"), Some("completed"))
    );
    let answer: Value = serde_json::from_str(event["task"]["result"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(answer["payment_id"], "pay_9", "the payment's id is in its callback: {event}");
    // Once: the receiver answered 2xx.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.requests().len(), 1);
}

/// A payment API that accepts a payment with 202 and a status URL, says
/// `running` twice, then `succeeded` with the payment's id.
fn long_running(target: &str, looks: u32) -> Reply {
    if target.starts_with("/v1/payments") {
        Reply::body(202, r#"{"status":"running"}"#)
            .header("location", "/v1/operations/op-1")
            .header("retry-after", "0")
    } else if looks <= 2 {
        Reply::body(200, r#"{"status":"running"}"#).header("retry-after", "0")
    } else {
        Reply::body(200, r#"{"status":"succeeded","payment_id":"pay_42"}"#)
            .header("content-type", "application/json")
    }
}

const FOLLOWED: &str = r#"
[systems.ops]
base_url = "http://{upstream}/v1/"
dedupes_by_key = true
key_ttl = "7d"

[systems.ops.routes."POST /payments"]
kind = "keyed_write"
follow = { field = "status", done = ["succeeded", "failed"], deadline = "1m" }

[systems.ops.routes."GET /operations/{id}"]
kind = "read"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_operation_is_followed_to_its_end_and_its_answer_kept() {
    let looks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let upstream = {
        let looks = looks.clone();
        Upstream::start(move |request, _| {
            let n = if request.target.starts_with("/v1/operations") {
                looks.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1
            } else {
                0
            };
            long_running(&request.target, n)
        })
        .await
    };
    let served = serve(&upstream, &format!("{SYSTEMS}\n{FOLLOWED}")).await;
    let key = IdempotencyKey::v5("order-42", "pay");
    let accepted = served.defer("ops/payments", key.as_str(), "100").await;
    assert_eq!(accepted.status().as_u16(), 202);
    let body: Value = accepted.json().await.unwrap();
    assert_eq!(body["deferred_because"], "accepted", "{body}");
    let handle = body["task_id"].as_str().unwrap();

    let done: Value = client()
        .get(format!("{}/tasks/{handle}?wait=20s", served.gateway))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (done["state"].as_str(), done["result"]["status"].as_u64()),
        (Some("completed"), Some(200)),
        "{done}"
    );
    let answer: Value = serde_json::from_str(done["result"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        (answer["status"].as_str(), answer["payment_id"].as_str()),
        (Some("succeeded"), Some("pay_42"))
    );
    let seen = upstream.requests();
    let writes = seen.iter().filter(|s| s.target.starts_with("/v1/payments")).count();
    let reads: Vec<_> = seen.iter().filter(|s| s.target == "/v1/operations/op-1").collect();
    assert_eq!(writes, 1, "the write is sent once; its operation is read");
    assert_eq!(reads.len(), 3, "running, running, succeeded");
    assert!(reads.iter().all(|r| r.method == "GET" && r.key().is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_that_outlives_its_deadline_fails_the_task() {
    let upstream = Upstream::start(|request, _| long_running(&request.target, 0)).await;
    let config = FOLLOWED.replace("deadline = \"1m\"", "deadline = \"1s\"");
    let served = serve(&upstream, &format!("{SYSTEMS}\n{config}")).await;
    let accepted = served.defer("ops/payments", IdempotencyKey::v5("order-43", "pay").as_str(), "100").await;
    let handle = accepted.json::<Value>().await.unwrap()["task_id"].as_str().unwrap().to_owned();
    let url = format!("{}/tasks/{handle}?wait=10s", served.gateway);
    let ended: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(ended["state"], "failed", "{ended}");
    let error = ended["last_error"].as_str().unwrap();
    assert!(error.contains("did not end within") && error.contains("operations/op-1"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_callers_are_bounded_per_listener() {
    let upstream = Upstream::start(|_, _| Reply::body(503, "down")).await;
    let config = SYSTEMS.replace("max_body = \"1KiB\"", "max_body = \"1KiB\"\nmax_waiters = 1");
    let served = serve(&upstream, &config).await;
    let deferred = served.defer("pay/payments", IdempotencyKey::v5("order-5", "pay").as_str(), "100").await;
    let location = deferred.headers()["location"].to_str().unwrap().to_owned();
    let url = format!("{}{location}", served.gateway);

    // Two callers wait at once: one holds the only place until its wait is
    // over (the task as it is then), the other is told to come back.
    let ask = || client().get(format!("{url}?wait=2s")).send();
    let (a, b) = tokio::join!(ask(), ask());
    let (a, b) = (a.unwrap(), b.unwrap());
    let (held, refused) = if a.status().as_u16() == 503 { (b, a) } else { (a, b) };
    assert_eq!((held.status().as_u16(), refused.status().as_u16()), (200, 503));
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(problem(refused).await["ballast"]["reason"], "too_many_waiters");
    assert!(["pending", "running"].contains(&held.json::<Value>().await.unwrap()["state"].as_str().unwrap()));
    assert_eq!(
        client().get(&url).send().await.unwrap().status().as_u16(),
        200,
        "asking without wait= is always answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_s_default_callback_is_called_and_must_be_a_listed_host() {
    let upstream = Upstream::start(|_, n| if n <= 3 { Reply::status(503) } else { Reply::status(201) }).await;
    let receiver = Upstream::start(|_, _| Reply::status(200)).await;
    std::env::set_var("GATEWAY_TEST_DEFAULT_CALLBACK_SECRET", "callback-secret-0123456789");
    let config = |callback_host: String| {
        SYSTEMS
            .replace(
                "max_body = \"1KiB\"",
                &format!(
                    "max_body = \"1KiB\"\ncallback_hosts = [\"{}\"]\ncallback_secret_env = \"GATEWAY_TEST_DEFAULT_CALLBACK_SECRET\"",
                    receiver.addr
                ),
            )
            .replace("key_ttl = \"7d\"", &format!("key_ttl = \"7d\"\ncallback = \"http://{callback_host}/paid\""))
    };

    let text = config("10.0.0.1:80".to_owned()).replace("{upstream}", &upstream.addr.to_string());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ballast.toml");
    std::fs::write(
        &path,
        text.replace(
            "[gateway]",
            &format!("[queue]\nurl = \"sqlite://{}/q.db\"\n\n[gateway]", dir.path().display()),
        ),
    )
    .unwrap();
    let refused = ballast_server::Server::bind(
        &ballast_config::Config::load(&path).unwrap(),
        support::prometheus(),
        None,
    )
    .await;
    let Err(error) = refused else { panic!("a default callback to an unlisted host is refused at start") };
    let error = error.to_string();
    assert!(error.contains("[systems.pay] callback") && error.contains("callback_hosts"), "{error}");

    let served = serve(&upstream, &config(receiver.addr.to_string())).await;
    let deferred = served.defer("pay/payments", IdempotencyKey::v5("order-6", "pay").as_str(), "100").await;
    assert_eq!(deferred.status().as_u16(), 202);
    eventually("the system's callback arrives", || async { !receiver.requests().is_empty() }).await;
    let call = &receiver.requests()[0];
    assert_eq!(call.target, "/paid");
    let event: Value = serde_json::from_slice(&call.body).unwrap();
    assert_eq!(event["task"]["result"]["status"], 201, "{event}");
}

/// An upstream on a raw socket that answers every request with `head` and
/// `body`, and then closes the connection: a body shorter than its
/// `content-length` breaks off there.
async fn raw_upstream(
    head: String,
    body: Vec<u8>,
) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (head, body, counted) = (head.clone(), body.clone(), counted.clone());
            tokio::spawn(async move {
                let mut request = [0u8; 8192];
                if socket.read(&mut request).await.unwrap_or(0) > 0 {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                }
            });
        }
    });
    (addr, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_streams_through_whole_and_one_that_breaks_off_cuts_the_callers_answer() {
    let body: Vec<u8> = (0..6 << 20).map(|i: usize| (i % 251) as u8).collect();
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-report: q3\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let (whole, _) = raw_upstream(head, body.clone()).await;
    let (cut, sent) = raw_upstream(
        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 4 << 20),
        body[..1 << 20].to_vec(),
    )
    .await;
    let config = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nbuffer_answer = \"64KiB\"\n\n[systems.reports]\nbase_url = \"http://{whole}/\"\n\n\
         [systems.cut]\nbase_url = \"http://{cut}/\"\n\n[systems.cut.retry]\nmax_attempts = 3\nfirst_delay = \"100ms\"\nmax_delay = \"200ms\"\n"
    );
    let served = support::serve_text(
        "",
        &format!(
            "[queue]\nurl = \"sqlite://{{dir}}/queue.db\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\n\n{config}"
        ),
    )
    .await;

    let response = client().get(format!("{}/call/reports/q3.csv", served.gateway)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["x-report"], "q3");
    assert_eq!(
        response.headers()["content-length"],
        body.len().to_string().as_str(),
        "the length is passed on"
    );
    let got = response.bytes().await.unwrap();
    assert!(got[..] == body[..], "6 MiB streamed through byte for byte");

    let response = client().get(format!("{}/call/cut/q3.csv", served.gateway)).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "the head came and was passed on");
    assert!(response.bytes().await.is_err(), "a body that broke off upstream is cut off for the caller too");
    assert_eq!(
        sent.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "once streaming began, the read is not sent again"
    );
}

/// `Prefer: respond-async` on a read with a key: the plan makes it a read,
/// so it is neither deferred nor read whole — it streams, and once its
/// answer has begun it is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_read_asking_for_respond_async_is_planned_as_a_read_and_streams() {
    let body: Vec<u8> = (0..1 << 20).map(|i: usize| (i % 251) as u8).collect();
    let (cut, sent) =
        raw_upstream(format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", 4 << 20), body).await;
    let served = support::serve_text(
        "",
        &format!(
            "[queue]\nurl = \"sqlite://{{dir}}/queue.db\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\n\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\nbuffer_answer = \"64KiB\"\n\n\
             [systems.reports]\nbase_url = \"http://{cut}/\"\ndedupes_by_key = true\nkey_ttl = \"7d\"\n\n\
             [systems.reports.retry]\nmax_attempts = 3\nfirst_delay = \"100ms\"\nmax_delay = \"200ms\"\n"
        ),
    )
    .await;
    let response = client()
        .get(format!("{}/call/reports/q3.csv", served.gateway))
        .header("idempotency-key", IdempotencyKey::v5("report-q3", "read").as_str())
        .header("prefer", "respond-async")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "a read's head is passed on, not a 202 or a 502");
    assert!(response.headers().get("preference-applied").is_none(), "not deferred");
    assert!(response.bytes().await.is_err(), "the body that broke off upstream is cut off for the caller");
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1, "streamed: not read whole and retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_on_a_loop_per_worker_and_a_taken_address_is_refused() {
    let upstream = Upstream::start(|_, _| Reply::body(200, "ok")).await;
    let config = "[gateway]\nlisten = \"127.0.0.1:0\"\nworkers = 3\n\n[systems.crm]\nbase_url = \"http://{upstream}/\"\n";
    let served = serve(&upstream, config).await;
    // Many connections at once: the kernel spreads them over the three loops.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..24 {
        let url = format!("{}/call/crm/x/{i}", served.gateway);
        calls.spawn(async move { reqwest::Client::new().get(url).send().await.unwrap().status().as_u16() });
    }
    let statuses = calls.join_all().await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let port = served.gateway.rsplit(':').next().unwrap().to_owned();
    let loops = std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with(&format!("gw:{port}/")))
                .count()
        })
        .unwrap_or(3);
    assert_eq!(loops, 3, "one thread per event loop");

    // Another gateway on the same address fails as "in use" instead of
    // quietly sharing its connections (SO_REUSEPORT would let it).
    let taken = served.gateway.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[queue]\nurl = \"sqlite://{}\"\n[serve]\nlisten = \"127.0.0.1:0\"\n[gateway]\nlisten = \"{taken}\"\n[systems.crm]\nbase_url = \"http://{}/\"\n",
        dir.path().join("q.db").display(),
        upstream.addr
    );
    let config = ballast_config::Config::parse("t.toml", text).unwrap();
    let err = ballast_server::Server::bind(&config, support::prometheus(), None).await.unwrap_err();
    assert!(matches!(err, ballast_server::ServeError::Bind { .. }), "{err}");
}

/// `[queue.periodic.NAME]`: a call to a system once a period, as a delivery
/// whose key names the period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_call_reaches_its_system_once_a_period_with_the_period_s_key() {
    let upstream = Upstream::start(|_, _| Reply::body(200, "reconciled")).await;
    let periodic =
        "[queue.periodic.reconcile]\nsystem = \"pay\"\nmethod = \"POST\"\npath = \"payments/reconcile\"\n\
                    body = \"{}\"\nevery = \"1s\"\nmax_attempts = 1\n\n";
    let config = format!("{periodic}{SYSTEMS}");
    let served = support::serve_with(&upstream, "", &config).await;
    // A caller's deferred write cannot take a period's key.
    let taken = send(
        client().post(format!("{}/call/pay/payments", served.gateway)),
        &[("idempotency-key", "periodic:reconcile:4102444800"), ("prefer", "respond-async")],
    )
    .await;
    assert_eq!(
        (taken.status().as_u16(), taken.headers()["ballast-problem"].to_str().unwrap()),
        (400, "bad_key")
    );
    eventually("three periods reached the system", || async { upstream.count() >= 3 }).await;
    // The dashboard shows it: its schedule, its next run and the last run's task.
    eventually("the dashboard shows the last run", || async {
        let live =
            client().get(format!("{}/ui/live", served.admin)).send().await.unwrap().text().await.unwrap();
        let row = live.split("data-periodic=\"reconcile\"").nth(1).unwrap_or_default();
        row.contains("every 1s") && row.contains("state completed") && row.contains(" · in ")
    })
    .await;
    drop(served);
    let seen = upstream.requests();
    let mut keys: Vec<&str> = seen.iter().filter_map(|s| s.header("x-idem-key")).collect();
    assert_eq!(keys.len(), seen.len(), "every call carries its key");
    assert!(seen.iter().all(|s| s.method == "POST" && s.target == "/v1/payments/reconcile"), "{seen:?}");
    assert!(keys.iter().all(|k| k.starts_with("periodic:reconcile:")), "{keys:?}");
    let calls = keys.len();
    keys.dedup();
    assert_eq!(keys.len(), calls, "one call per period: {keys:?}");
}
