//! A key names one request (R-RES-RE-1), through the real `ballast serve`:
//! the same key with another body is refused 422 `key_reused` unsent and
//! never merged into the first request's task, and after a live answer for
//! the system's `key_ttl`; the same request sent twice at once (a double
//! click) reaches the system once and both callers get its answer.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast_test_support::{Reply, Upstream};
use serde_json::Value;
use support::{client, queued, Served};

const PAY: &str = include_str!("configs/in_flight.toml");

async fn pay(served: &Served, key: &str, body: &'static str, defer: bool) -> reqwest::Response {
    let mut request = client()
        .post(format!("{}/call/pay/payments", served.gateway))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body);
    if defer {
        request = request.header("prefer", "respond-async");
    }
    request.send().await.unwrap()
}

/// `click`, sent once the first request is at the system.
async fn once_at_the_system<T>(first_in: &AtomicBool, click: impl std::future::Future<Output = T>) -> T {
    while !first_in.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    click.await
}

/// During an outage, `{"amount":100}` is deferred under a key; the same key
/// with `{"amount":999999}` is 422 `key_reused`: nothing sent, no handle of
/// the first task, and the task still holds the first body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_with_another_body_is_refused_unsent_and_the_task_keeps_the_first() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let served = Served::start(&upstream, "", PAY);

    let first = pay(&served, "order-9-pay", r#"{"amount":100}"#, true).await;
    assert_eq!(first.status().as_u16(), 202, "the outage defers the first");
    let location = first.headers()["location"].to_str().unwrap().to_owned();

    let second = pay(&served, "order-9-pay", r#"{"amount":999999}"#, true).await;
    assert_eq!(second.status().as_u16(), 422);
    assert!(second.headers().get("location").is_none(), "no handle of the first task");
    assert_eq!(second.headers()["ballast-problem"], "key_reused");
    let problem: Value = second.json().await.unwrap();
    assert_eq!(problem["ballast"]["rule"], "R-RES-RE-1", "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("not sent"), "{problem}");
    assert!(
        !upstream.requests().iter().any(|seen| seen.text().contains("999999")),
        "the reused key sent nothing"
    );

    let tasks = queued(served.dir.path());
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0]["payload"]["body"]["data"], r#"{"amount":100}"#, "{}", tasks[0]);

    // The same request again is the first one's, still deferred: its handle.
    let again = pay(&served, "order-9-pay", r#"{"amount":100}"#, true).await;
    assert_eq!(again.status().as_u16(), 202);
    assert_eq!(again.headers()["location"].to_str().unwrap(), location, "joined the deferred task");
    assert_eq!(again.headers()["ballast-attempts"], "0", "nothing sent");
}

/// After a live 201, the same key with another body is 422 `key_reused`,
/// nothing sent, whether it asks to be deferred or not, and after a
/// restart; the same request again is sent (the system dedupes it); another
/// caller's request under the key is its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_answered_live_stays_bound_to_its_request_for_its_key_ttl() {
    let upstream = Upstream::start(|_, _| Reply::body(201, r#"{"payment":"p-1"}"#)).await;
    let mut served = Served::start(&upstream, "", PAY);

    for defer in [false, true] {
        let key = format!("order-3-pay-{defer}");
        let first = pay(&served, &key, r#"{"amount":100}"#, defer).await;
        assert_eq!(first.status().as_u16(), 201, "the system is up: answered live");

        let other = pay(&served, &key, r#"{"amount":999999}"#, defer).await;
        assert_eq!(other.status().as_u16(), 422, "defer {defer}");
        assert_eq!(other.headers()["ballast-problem"], "key_reused");
        assert_eq!(other.headers()["ballast-attempts"], "0");
        let problem: Value = other.json().await.unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains("sent within the key's life"), "{detail}");
        assert!(detail.contains("derive it from the payment attempt, not the order"), "{detail}");
        assert_eq!(problem["ballast"]["rule"], "R-RES-RE-1", "{problem}");
    }
    assert!(!upstream.requests().iter().any(|seen| seen.text().contains("999999")), "nothing of it was sent");

    served.restart(&[]);
    let again = pay(&served, "order-3-pay-false", r#"{"amount":5}"#, false).await;
    assert_eq!(again.status().as_u16(), 422, "the binding is in the database, not the process");
    let retry = pay(&served, "order-3-pay-false", r#"{"amount":100}"#, false).await;
    assert_eq!(retry.status().as_u16(), 201, "a retry of the same request is sent");
    assert_eq!(upstream.count_with("idempotency-key", "order-3-pay-false"), 2);

    let theirs = client()
        .post(format!("{}/call/pay/payments", served.gateway))
        .header("idempotency-key", "order-3-pay-false")
        .header("authorization", "Bearer another-service")
        .header("content-type", "application/json")
        .body(r#"{"amount":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status().as_u16(), 201, "another caller's key is its own");
}

/// Two identical keyed writes at once reach the system once; both callers
/// get the system's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_click_is_sent_once_and_both_get_the_answer() {
    let first_in = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&first_in);
    let upstream = Upstream::start(move |_, _| {
        seen.store(true, Ordering::SeqCst);
        Reply::body(201, r#"{"payment":"p-7"}"#).after(Duration::from_millis(300))
    })
    .await;
    let served = Served::start(&upstream, "", PAY);

    let one = pay(&served, "order-7-pay", r#"{"amount":100}"#, false);
    let two = once_at_the_system(&first_in, pay(&served, "order-7-pay", r#"{"amount":100}"#, false));
    let (one, two) = tokio::join!(one, two);
    let (one_status, two_status) = (one.status().as_u16(), two.status().as_u16());
    let (one, two) = (one.text().await.unwrap(), two.text().await.unwrap());
    assert_eq!((one_status, two_status), (201, 201));
    assert_eq!((one.as_str(), two.as_str()), (r#"{"payment":"p-7"}"#, r#"{"payment":"p-7"}"#));
    assert_eq!(upstream.count_with("idempotency-key", "order-7-pay"), 1, "one upstream call");

    // Another body under the key while one is in flight: refused unsent.
    first_in.store(false, Ordering::SeqCst);
    let one = pay(&served, "order-8-pay", r#"{"amount":100}"#, false);
    let other = once_at_the_system(&first_in, pay(&served, "order-8-pay", r#"{"amount":5}"#, false));
    let (one, other) = tokio::join!(one, other);
    assert_eq!(one.status().as_u16(), 201);
    assert_eq!(other.status().as_u16(), 422);
    assert_eq!(upstream.count_with("idempotency-key", "order-8-pay"), 1);
}
