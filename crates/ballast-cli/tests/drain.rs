//! A deploy loses nothing, through the real `ballast serve`: a SIGTERM with
//! writes in flight fails readiness at once, serves on for the drain delay,
//! lets every call in flight finish — or answers it at the deadline, a keyed
//! write handed to the queue with its key — and exits as soon as it is done.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ballast_test_support::{Reply, Upstream};
use serde_json::Value;
use support::{client, Served};

/// A payment system that deduplicates by key, the guide's bulkhead of 8.
const PAY: &str = r#"
[systems.pay]
base_url = "http://{up}/"
dedupes_by_key = true
key_ttl = "1h"

[systems.pay.bulkhead]
limit = 8

[systems.pay.timeout]
attempt = "4s"

[systems.crm]
base_url = "http://{up}/"
bulkhead = "none"

[systems.crm.timeout]
attempt = "4s"
"#;

fn sigterm(served: &Served) {
    let sent =
        std::process::Command::new("kill").args(["-TERM", &served.child.id().to_string()]).status().unwrap();
    assert!(sent.success());
}

/// Waits for the process to exit: how long it took.
async fn exited(served: &mut Served, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}\n{}", served.log());
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "still running {within:?} after SIGTERM:\n{}", served.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_payments_in_flight_at_a_sigterm_are_all_answered_and_readiness_leads() {
    // A 2 s upstream: every payment is still at the system when the signal comes.
    let upstream = Upstream::start(|seen, _| {
        Reply::body(201, format!(r#"{{"paid":"{}"}}"#, seen.key().unwrap_or_default()))
            .after(Duration::from_secs(2))
    })
    .await;
    let mut served = Served::start(
        &upstream,
        "",
        &format!("[serve]\ndrain_delay = \"1s\"\ndrain_timeout = \"10s\"\n{PAY}"),
    );
    let gateway = Arc::new(served.gateway.clone());
    let payments: Vec<_> = (0..20)
        .map(|i| {
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move {
                let answer = client()
                    .post(format!("{gateway}/call/pay/payments"))
                    .header("idempotency-key", format!("payment-{i}"))
                    .header("prefer", "respond-async")
                    .body(r#"{"amount":100}"#)
                    .send()
                    .await;
                answer.map(|a| a.status().as_u16()).map_err(|e| e.to_string())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let signalled = Instant::now();
    sigterm(&served);
    // Readiness fails at once, and is answered (not refused) while draining.
    let ready = format!("{}/health/ready", served.admin);
    let mut unready = None;
    while signalled.elapsed() < Duration::from_secs(1) {
        let answer = client().get(&ready).send().await.expect("readiness is answered while draining");
        if answer.status() == 503 {
            let body: Value = answer.json().await.unwrap();
            assert_eq!(body["draining"], true, "{body}");
            unready = Some(signalled.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unready = unready.expect("readiness answered 503 within a second of the signal");
    // The gateway still serves during the delay: a read gets its answer.
    let during = client().get(format!("{}/call/crm/leads", served.gateway)).send().await.unwrap();
    assert_eq!(during.status(), 201);
    assert_eq!(during.headers()["connection"], "close", "kept-alive callers move elsewhere");
    let mut statuses = Vec::new();
    for payment in payments {
        statuses.push(payment.await.unwrap());
    }
    assert!(statuses.iter().all(|s| matches!(s, Ok(201 | 202))), "every caller got an answer: {statuses:?}");
    let took = exited(&mut served, Duration::from_secs(15)).await;
    let log = served.log();
    assert!(log.contains("calls finished"), "{log}");
    assert!(took < Duration::from_secs(6), "exits once done, not after a fixed wait: {took:?}");
    eprintln!("readiness 503 after {unready:?}; exited {took:?} after the signal; {statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_still_in_flight_at_the_deadline_are_answered_never_cut() {
    let slow = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let slowness = Arc::clone(&slow);
    let upstream = Upstream::start(move |seen, _| {
        let reply = Reply::body(201, format!(r#"{{"paid":"{}"}}"#, seen.key().unwrap_or_default()));
        if slowness.load(std::sync::atomic::Ordering::SeqCst) {
            reply.after(Duration::from_secs(30))
        } else {
            reply
        }
    })
    .await;
    // One attempt that outlasts the drain: the deadline meets every call in flight.
    let pay = PAY.replacen("attempt = \"4s\"", "attempt = \"25s\"", 1)
        + "\n[systems.pay.retry]\nmax_attempts = 1\n";
    let mut served = Served::start(
        &upstream,
        "",
        &format!("[serve]\ndrain_delay = \"200ms\"\ndrain_timeout = \"1s\"\n{pay}"),
    );
    let gateway = served.gateway.clone();
    let send = |method: reqwest::Method, path: &str, headers: &[(&str, &str)]| {
        let mut request = client().request(method, format!("{gateway}/call/pay/{path}")).body("{}");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        tokio::spawn(async move {
            let answer = request.send().await.expect("an answer, never a reset");
            let status = answer.status().as_u16();
            let retry_after = answer.headers().get("retry-after").is_some();
            (status, retry_after, answer.json::<Value>().await.unwrap_or_default())
        })
    };
    let deferred = send(
        reqwest::Method::POST,
        "payments",
        &[("idempotency-key", "pay-async"), ("prefer", "respond-async")],
    );
    let live = send(reqwest::Method::POST, "payments", &[("idempotency-key", "pay-live")]);
    let once = send(reqwest::Method::POST, "notes", &[]);
    let read = send(reqwest::Method::GET, "balance", &[]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm(&served);
    let (status, _, body) = deferred.await.unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["deferred_because"], "draining");
    let handle = body["task_id"].as_str().unwrap().to_owned();
    let (status, retry_after, body) = live.await.unwrap();
    assert_eq!((status, body["ballast"]["reason"].as_str()), (503, Some("draining")), "{body}");
    assert!(retry_after);
    assert!(
        body["detail"].as_str().unwrap().contains("resending it with the same Idempotency-Key is safe"),
        "{body}"
    );
    let (status, _, body) = once.await.unwrap();
    assert_eq!((status, body["ballast"]["reason"].as_str()), (503, Some("draining")), "{body}");
    assert_eq!(body["ballast"]["sent"], true, "its outcome is unknown: {body}");
    let call_id = body["ballast"]["call_id"].as_str().unwrap().to_owned();
    let (status, retry_after, body) = read.await.unwrap();
    assert_eq!(
        (status, body["ballast"]["reason"].as_str(), retry_after),
        (503, Some("draining"), true),
        "{body}"
    );
    exited(&mut served, Duration::from_secs(10)).await;
    let log = served.log();
    assert!(log.contains(&call_id), "the log names the write of unknown outcome: {log}");
    assert!(log.contains("2 handed over to the queue, 2 refused"), "{log}");

    // The next replica delivers both handed-over writes with their keys.
    slow.store(false, std::sync::atomic::Ordering::SeqCst);
    served.restart(&[]);
    ballast_test_support::eventually("the handed-over writes are delivered", || async {
        served.task(&format!("/tasks/{handle}")).await["state"] == "completed"
            && upstream.requests().iter().filter(|s| s.key() == Some("pay-live")).count() >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_drain_begins_the_drain_behind_the_token() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let token = "a-token-of-at-least-16-bytes";
    let served = Served::start_with(
        &upstream,
        "",
        &format!("[serve]\ntoken_env = \"ADMIN_TOKEN\"\ndrain_delay = \"30s\"\n{PAY}"),
        &[("ADMIN_TOKEN", token.to_owned())],
    );
    let drain = format!("{}/admin/drain", served.admin);
    assert_eq!(client().post(&drain).send().await.unwrap().status(), 401);
    assert_eq!(client().get(format!("{}/health/ready", served.admin)).send().await.unwrap().status(), 200);
    let began = client().post(&drain).bearer_auth(token).send().await.unwrap();
    assert_eq!(began.status(), 202);
    assert_eq!(began.json::<Value>().await.unwrap()["began_now"], true);
    let ready = client().get(format!("{}/health/ready", served.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    // The gateway serves on through the delay.
    assert_eq!(client().get(format!("{}/call/pay/x", served.gateway)).send().await.unwrap().status(), 200);
}
