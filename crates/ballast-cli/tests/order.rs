//! Writes land in order, through the real `ballast serve`: a write to an
//! entity deferred during an outage is not overtaken by a later write to
//! the same entity (named by `Ballast-Sequence`, or by the route's
//! `sequence`); the later one waits behind it.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ballast_test_support::{eventually, Reply, Upstream};
use serde_json::Value;
use support::{client, Served};

const CRM: &str = include_str!("configs/in_flight.toml");

/// The same system with its route naming the sequence from the path.
const CRM_ROUTED: &str = r#"
[systems.pay.routes]
"PUT /customers/{id}" = { kind = "keyed_write", sequence = "customer/{id}" }
"#;

/// How a write names its sequence.
#[derive(Clone, Copy)]
enum Named {
    ByHeader,
    ByRoute,
}

fn serve(upstream: &Upstream, named: Named) -> Served {
    match named {
        Named::ByHeader => Served::start(upstream, "", CRM),
        Named::ByRoute => Served::start(upstream, "", &format!("{CRM}{CRM_ROUTED}")),
    }
}

async fn put(served: &Served, key: &str, email: &str, defer: bool) -> reqwest::Response {
    put_as(served, Named::ByHeader, key, email, defer).await
}

async fn put_as(served: &Served, named: Named, key: &str, email: &str, defer: bool) -> reqwest::Response {
    let mut request = client()
        .put(format!("{}/call/pay/customers/42", served.gateway))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(format!(r#"{{"email":"{email}"}}"#));
    if let Named::ByHeader = named {
        request = request.header("ballast-sequence", "customer/42");
    }
    if defer {
        request = request.header("prefer", "respond-async");
    }
    request.send().await.unwrap()
}

/// A CRM that answers 503 until it is up (and to v1 while `v1_down`), then
/// refuses with 422 the writes `refused` picks and applies the rest, in
/// the order they came.
async fn crm(
    refused: fn(&str) -> bool,
    v1_down: Arc<AtomicBool>,
) -> (Upstream, Arc<AtomicBool>, Arc<Mutex<Vec<String>>>) {
    let up = Arc::new(AtomicBool::new(false));
    let applied: Arc<Mutex<Vec<String>>> = Arc::default();
    let (is_up, log) = (Arc::clone(&up), Arc::clone(&applied));
    let upstream = Upstream::start(move |seen, _| {
        let v1 = seen.text().contains("v1");
        if !is_up.load(Ordering::SeqCst) || (v1 && v1_down.load(Ordering::SeqCst)) {
            return Reply::status(503);
        }
        assert!(seen.header("ballast-sequence").is_none(), "the gateway's own header is not forwarded");
        if refused(&seen.text()) {
            return Reply::body(422, r#"{"error":"email taken"}"#);
        }
        log.lock().unwrap().push(seen.text());
        Reply::body(200, seen.text())
    })
    .await;
    (upstream, up, applied)
}

/// v1 deferred in an outage; after it, v2 is refused 409 `sequence_pending`
/// sent live, and deferred behind v1 with `Prefer: respond-async`; the
/// upstream applies v1, then v2: the customer's final state is v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_write_to_an_entity_waits_behind_the_deferred_one() {
    later_write_waits(Named::ByHeader).await;
}

/// The same, the sequence named by the route: `"PUT /customers/{id}" = {
/// kind = "keyed_write", sequence = "customer/{id}" }`, no header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_s_sequence_orders_writes_without_a_header() {
    later_write_waits(Named::ByRoute).await;
}

async fn later_write_waits(named: Named) {
    // v1's outage lasts until v2 has been tried: the worker cannot deliver
    // v1 first and free the sequence.
    let v1_down = Arc::new(AtomicBool::new(true));
    let (upstream, up, applied) = crm(|_| false, Arc::clone(&v1_down)).await;
    let served = serve(&upstream, named);
    let put = |key: &'static str, email: &'static str, defer: bool| put_as(&served, named, key, email, defer);

    let v1 = put("customer-42-v1", "v1", true).await;
    assert_eq!(v1.status().as_u16(), 202, "the outage defers v1");
    let v1_at = v1.headers()["location"].to_str().unwrap().to_owned();
    up.store(true, Ordering::SeqCst);

    let live = put("customer-42-v2", "v2", false).await;
    assert_eq!(live.status().as_u16(), 409);
    assert_eq!(live.headers()["ballast-problem"], "sequence_pending");
    let problem: Value = live.json().await.unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("customer/42"), "{problem}");
    assert!(applied.lock().unwrap().is_empty(), "v2 was not sent past v1");

    let v2 = put("customer-42-v2", "v2", true).await;
    assert_eq!(v2.status().as_u16(), 202, "deferred behind v1");
    assert_eq!(v2.headers()["ballast-attempts"], "0", "not sent live");
    let v2_at = v2.headers()["location"].to_str().unwrap().to_owned();
    v1_down.store(false, Ordering::SeqCst);
    for at in [&v1_at, &v2_at] {
        eventually("the writes are delivered", || async { served.task(at).await["state"] == "completed" })
            .await;
    }
    assert_eq!(
        *applied.lock().unwrap(),
        [r#"{"email":"v1"}"#, r#"{"email":"v2"}"#],
        "the upstream saw the writes in the order they were accepted"
    );
}

/// A write that fails for good holds its sequence — the write behind it is
/// not delivered — until an operator takes it out with `ballast queue
/// release`; then the next goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_holds_its_sequence_until_released() {
    let (upstream, up, applied) = crm(|body| body.contains("v1"), Arc::default()).await;
    let served = Served::start(&upstream, "", CRM);
    assert_eq!(put(&served, "customer-42-v1", "v1", true).await.status().as_u16(), 202);
    up.store(true, Ordering::SeqCst);
    let v2 = put(&served, "customer-42-v2", "v2", true).await;
    assert_eq!(v2.status().as_u16(), 202);
    let v2_at = v2.headers()["location"].to_str().unwrap().to_owned();
    let v1_id = eventually_failed(&served).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(served.task(&v2_at).await["state"], "pending", "held behind the failed v1");
    assert!(applied.lock().unwrap().is_empty());

    let db = format!("sqlite://{}", served.dir.path().join("tasks.db").display());
    let out = support::ballast(&["queue", "--db", &db, "release", &v1_id.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("left its sequence"));
    eventually("v2 is delivered", || async { served.task(&v2_at).await["state"] == "completed" }).await;
    assert_eq!(*applied.lock().unwrap(), [r#"{"email":"v2"}"#]);
    let again = support::ballast(&["queue", "--db", &db, "release", &v1_id.to_string()]);
    assert_eq!(again.status.code(), Some(1), "released once");
}

/// The id of the deferred write once it failed for good.
async fn eventually_failed(served: &Served) -> i64 {
    let failed = || {
        support::queued(served.dir.path())
            .into_iter()
            .find(|t| t["state"] == "failed" && t["kind"] == "ballast.http.delivery/pay")
            .and_then(|t| t["id"].as_i64())
    };
    eventually("v1 fails for good", || async { failed().is_some() }).await;
    failed().unwrap()
}
