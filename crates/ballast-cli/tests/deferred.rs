//! A deferred write's loop closed, through the real `ballast serve`: a
//! backlog left by an outage drains as fast as the system's limits allow
//! while the gateway stays ready, and an operation the system accepted with
//! 202 is followed to its end across a restart of the worker.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_test_support::{Reply, Upstream};
use serde_json::Value;
use support::{client, Served};

/// The payment system: critical, deduplicating by key, its breaker probing
/// 2 s after it opens, 8 attempts at once, 50 a second.
const PAY: &str = r#"
[systems.pay]
base_url = "http://{up}/"
dedupes_by_key = true
key_ttl = "1h"
critical = true

[systems.pay.retry]
max_attempts = 2
first_delay = "100ms"
max_delay = "200ms"

[systems.pay.timeout]
attempt = "1s"

[systems.pay.breaker]
kind = "consecutive"
threshold = 5
half_open_after = "2s"

[systems.pay.bulkhead]
limit = 8

[systems.pay.rate_limit]
rate = "50/s"
burst = 10
wait = "1s"
"#;

const HALF_OPEN_AFTER: Duration = Duration::from_secs(2);
const RATE: f64 = 50.0;
const PAYMENTS: usize = 150;

/// A payment API that answers 503 while down; up, it charges each key once
/// and answers 201 with the payment's id.
async fn payments(up: Arc<AtomicBool>) -> (Upstream, Arc<Mutex<HashMap<String, u32>>>) {
    let charged: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let ledger = Arc::clone(&charged);
    let upstream = Upstream::start(move |seen, _| {
        if !up.load(Ordering::SeqCst) {
            return Reply::status(503);
        }
        let key = seen.key().unwrap_or_default().to_owned();
        let mut ledger = ledger.lock().unwrap();
        let n = ledger.entry(key.clone()).or_default();
        *n += 1;
        Reply::body(201, format!(r#"{{"payment_id":"pay-{key}"}}"#))
            .header("content-type", "application/json")
    })
    .await;
    (upstream, charged)
}

async fn status(url: &str) -> u16 {
    client().get(url).send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_drains_at_the_system_s_pace_and_the_gateway_stays_ready_through_the_outage() {
    let up = Arc::new(AtomicBool::new(false));
    let (upstream, charged) = payments(Arc::clone(&up)).await;
    let served = Served::start(&upstream, "", PAY);
    let (ready, systems) =
        (format!("{}/health/ready", served.admin), format!("{}/health/systems", served.admin));
    assert_eq!(status(&ready).await, 200);

    // The outage: every payment is deferred (its attempts spent, then the
    // breaker open), and the gateway stays ready while it takes them.
    let outage = Instant::now();
    let mut handles = Vec::with_capacity(PAYMENTS);
    for batch in (0..PAYMENTS).collect::<Vec<_>>().chunks(10) {
        let deferred = batch.iter().map(|i| {
            let key = format!("order-{i}");
            let served = &served;
            async move { served.defer("pay/payments", &key).await }
        });
        for response in futures_util::future::join_all(deferred).await {
            assert_eq!(response.status().as_u16(), 202, "deferred, not refused");
            let body: Value = response.json().await.unwrap();
            handles.push((body["task_id"].as_str().unwrap().to_owned(), Instant::now()));
        }
        assert_eq!(status(&ready).await, 200, "the gateway is ready: it takes and defers the payments");
    }
    assert_eq!(status(&systems).await, 503, "pay is critical and unavailable: /health/systems says so");
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(outage.elapsed())).await;
    assert_eq!(status(&ready).await, 200);

    up.store(true, Ordering::SeqCst);
    let recovered = Instant::now();
    // Each caller waits for its own payment: no polling.
    let gateway = served.gateway.as_str();
    let waits = handles.iter().map(|(handle, accepted)| async move {
        loop {
            let url = format!("{gateway}/tasks/{handle}?wait=30s");
            let task: Value = client().get(&url).send().await.unwrap().json().await.unwrap();
            if task["state"] != "pending" && task["state"] != "running" {
                return (task, recovered.elapsed(), accepted.elapsed());
            }
        }
    });
    let ended = futures_util::future::join_all(waits).await;
    let drained = ended.iter().map(|(_, at, _)| *at).max().unwrap();
    let mut since_202: Vec<Duration> = ended.iter().map(|(_, _, since)| *since).collect();
    since_202.sort();
    for (task, _, _) in &ended {
        assert_eq!(task["state"], "completed", "{task}");
        let answer: Value = serde_json::from_str(task["result"]["body"].as_str().unwrap()).unwrap();
        assert!(answer["payment_id"].as_str().unwrap().starts_with("pay-order-"), "{task}");
    }
    let charged = charged.lock().unwrap().clone();
    assert_eq!(charged.len(), PAYMENTS);
    assert!(charged.values().all(|n| *n == 1), "each payment charged once: {charged:?}");

    let bound = HALF_OPEN_AFTER + Duration::from_secs_f64(PAYMENTS as f64 / RATE) + Duration::from_secs(5);
    eprintln!(
        "{PAYMENTS} deferred payments completed {:.1} s after the outage ended (bound {:.1} s: the breaker's probe \
         {:.0} s + {PAYMENTS} / {RATE}/s + 5 s); from 202 to completed: median {:.1} s, max {:.1} s",
        drained.as_secs_f64(),
        bound.as_secs_f64(),
        HALF_OPEN_AFTER.as_secs_f64(),
        since_202[since_202.len() / 2].as_secs_f64(),
        since_202[since_202.len() - 1].as_secs_f64(),
    );
    assert!(drained <= bound, "the backlog drained in {drained:?}, over {bound:?}");
    let log = served.log();
    let refused = log.lines().filter(|l| l.contains("task postponed") && l.contains("bulkhead")).count();
    assert_eq!(refused, 0, "no delivery refused by the bulkhead: they wait for slots instead");
    eprintln!("{} postponements (breaker open or probing)", log.matches("task postponed").count());
}

/// A route whose writes the system accepts with 202 and a status URL.
const OPERATIONS: &str = r#"
[systems.ops]
base_url = "http://{up}/v1/"
dedupes_by_key = true
key_ttl = "1h"

[systems.ops.routes."POST /payments"]
kind = "keyed_write"
follow = { field = "status", done = ["succeeded", "failed"], deadline = "5m" }

[systems.ops.routes."GET /operations/{id}"]
kind = "read"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_operation_is_followed_to_its_end_across_a_restart() {
    let finished = Arc::new(AtomicBool::new(false));
    let (writes, looks) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let upstream = {
        let (finished, writes, looks) = (Arc::clone(&finished), Arc::clone(&writes), Arc::clone(&looks));
        Upstream::start(move |seen, _| {
            if seen.target.starts_with("/v1/payments") {
                writes.fetch_add(1, Ordering::SeqCst);
                return Reply::status(202)
                    .header("location", "/v1/operations/op-7")
                    .header("retry-after", "0");
            }
            looks.fetch_add(1, Ordering::SeqCst);
            if finished.load(Ordering::SeqCst) {
                Reply::body(200, r#"{"status":"succeeded","payment_id":"pay-77"}"#)
            } else {
                Reply::body(200, r#"{"status":"running"}"#).header("retry-after", "0")
            }
        })
        .await
    };
    // A worker killed while it reads the status holds the task until its
    // lease lapses: a short one, so the next worker takes it over soon.
    let mut served = Served::start(&upstream, "lease = \"2s\"", OPERATIONS);
    let accepted = served.defer("ops/payments", "order-77").await;
    assert_eq!(accepted.status().as_u16(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = accepted.json().await.unwrap();
    assert_eq!(body["deferred_because"], "accepted", "{body}");

    ballast_test_support::eventually("the worker reads the status", || async {
        looks.load(Ordering::SeqCst) >= 2
    })
    .await;
    served.restart(&[]);
    let before = looks.load(Ordering::SeqCst);
    ballast_test_support::eventually("the new worker reads it on", || async {
        looks.load(Ordering::SeqCst) > before
    })
    .await;
    finished.store(true, Ordering::SeqCst);
    let task = served.waited(&location).await;
    assert_eq!(task["state"], "completed", "{task}");
    let answer: Value = serde_json::from_str(task["result"]["body"].as_str().unwrap()).unwrap();
    assert_eq!(answer["payment_id"], "pay-77");
    assert_eq!(writes.load(Ordering::SeqCst), 1, "the write went once; the restart read its status on");
}
