//! `ballast serve` keeps the promise the library keeps, end to end through
//! the real binary: durable settings reach its tasks, a 409 "still in
//! flight" is not a failure, paths stay under the base URL, a reload cannot
//! strand deliveries, and a loop through the gateway is refused.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_test_support::{eventually, send, Reply, Upstream};
use serde_json::Value;
use support::{ballast, client, queued, raw, Served};

fn problem_reason(body: &Value) -> &str {
    body["ballast"]["reason"].as_str().unwrap_or_default()
}

/// The durable settings of `[queue]` reach every task `serve` makes: the
/// deferral's and the alert's get `max_attempts = 3`, the number `ballast
/// explain` reasons with, and a write is tried exactly that often.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_serve_makes_have_the_durable_settings_lint_checked() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let alerts = Upstream::start(|_, _| Reply::status(200)).await;
    let rest = include_str!("configs/durable_settings.toml");
    let served = Served::start_with(
        &upstream,
        "max_attempts = 3\n",
        rest,
        &[("PROMISE_ALERT_URL", alerts.url("/hook"))],
    );
    let explained = ballast(&["explain", served.config().to_str().unwrap(), "--system", "pay"]);
    let explained = String::from_utf8_lossy(&explained.stdout).into_owned();
    assert!(explained.contains("up to 3 attempts"), "{explained}");

    let response = served.defer("pay/payments", "order-1-pay").await;
    assert_eq!(response.status().as_u16(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let task = served.task(&location).await;
    assert_eq!(task["max_attempts"], 3, "the deferral's attempts are the file's: {task}");

    // 3 durable attempts (1 s – 2 s, then 2 s – 4 s apart), then failed and alerted once.
    eventually("the delivery fails after its 3 attempts", || async {
        served.task(&location).await["state"] == "failed"
    })
    .await;
    let task = served.task(&location).await;
    assert_eq!(task["attempts"], 3, "{task}");
    assert_eq!(
        upstream.count_with("idempotency-key", "order-1-pay"),
        1 + 3,
        "the first call and 3 deliveries"
    );
    eventually("the alert is posted", || async { alerts.count() == 1 }).await;
    let alert = queued(served.dir.path()).into_iter().find(|t| t["kind"] == "ballast.alert").unwrap();
    assert_eq!(alert["max_attempts"], 3, "the alert's delivery follows the file too: {alert}");
}

/// A keyed write whose first attempt timed out on a slow answer meets 409
/// "still in flight" on its next ones: it is tried again later with the same
/// key, and completes once the original's answer can be replayed — no
/// failure, no alert, one payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_while_the_original_is_in_flight_is_tried_again_not_failed() {
    // A system that deduplicates like Stripe: the first request with a key is
    // applied slowly (1.5 s); a repeat meanwhile gets 409, later the replay.
    let done_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let applied: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let (done, counts) = (Arc::clone(&done_at), Arc::clone(&applied));
    let upstream = Upstream::start(move |seen, _| {
        let key = seen.header("idempotency-key").unwrap_or_default().to_owned();
        let mut done = done.lock().unwrap();
        match done.get(&key) {
            None => {
                done.insert(key.clone(), Instant::now() + Duration::from_millis(1500));
                *counts.lock().unwrap().entry(key).or_default() += 1;
                Reply::body(201, r#"{"payment":"p-1"}"#).after(Duration::from_millis(1500))
            }
            Some(at) if Instant::now() < *at => Reply::body(409, r#"{"title":"request in progress"}"#),
            Some(_) => Reply::body(201, r#"{"payment":"p-1"}"#),
        }
    })
    .await;
    let rest = include_str!("configs/in_flight.toml");
    let served = Served::start(&upstream, "", rest);

    let response = served.defer("pay/payments", "order-2-pay").await;
    assert_eq!(response.status().as_u16(), 202, "timed out, then 409 in flight: deferred, not failed");
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    eventually("the deferred write completes", || async {
        served.task(&location).await["state"] == "completed"
    })
    .await;
    let task = served.task(&location).await;
    assert_eq!(task["result"]["status"], 201, "{task}");
    assert_eq!(applied.lock().unwrap()["order-2-pay"], 1, "one payment");
    assert!(upstream.count_with("idempotency-key", "order-2-pay") >= 3, "the original, a 409, the replay");
    let failed: Vec<Value> =
        queued(served.dir.path()).into_iter().filter(|t| t["state"] == "failed").collect();
    assert!(failed.is_empty(), "nothing failed, nobody paged: {failed:?}");
}

/// Dot segments in any spelling are refused with `bad_path`, nothing sent,
/// also for a write the caller lets the gateway defer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_cannot_leave_the_base_url() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let rest = "[systems.pay]\nbase_url = \"http://{up}/api/v1/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n";
    let served = Served::start(&upstream, "", rest);
    for path in [
        "/call/pay/%2e%2e/%2e%2e/admin/refund",
        "/call/pay/../../admin/refund",
        "/call/pay/.%2e/admin/refund",
        "/call/pay/%2E%2E/admin/refund",
        "/call/pay/..%5c..%5cadmin/refund",
        "/call/pay/x/..\\..\\..\\admin/refund",
    ] {
        for deferred in [false, true] {
            let prefer = if deferred { "Prefer: respond-async\r\n" } else { "" };
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: k-{deferred}\r\n{prefer}Content-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            );
            let (status, body) = raw(&served.gateway, &request).await;
            assert_eq!(status, 400, "{path}: {body}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(problem_reason(&body), "bad_path", "{path}: {body}");
        }
    }
    assert_eq!(upstream.count(), 0, "nothing reached the upstream");
    assert!(queued(served.dir.path()).is_empty(), "nothing was stored for later either");
    let (status, _) = raw(
        &served.gateway,
        "GET /call/pay/orders/7 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!((status, upstream.requests()[0].target.as_str()), (200, "/api/v1/orders/7"));
}

/// A reload that would strand a pending delivery is refused and says why;
/// one that removes the system on purpose is taken, and the delivery is
/// held, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_cannot_silently_drop_a_system_with_deliveries() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let system = "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n";
    let served = Served::start(&upstream, "", system);
    let response = served.defer("pay/payments", "order-3-pay").await;
    assert_eq!(response.status().as_u16(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let queue = format!(
        "[queue]\nurl = \"sqlite://{}\"\npoll_interval = \"100ms\"\n",
        served.dir.path().join("tasks.db").display()
    );

    for (refusals, (file, why)) in (1..).zip([
        (String::new(), "no [queue]"),
        (queue.clone(), "\"pay\" with 1 unfinished deliveries"),
        (
            format!("{queue}[systems.other]\nbase_url = \"http://127.0.0.1:1/\"\n"),
            "\"pay\" with 1 unfinished",
        ),
    ]) {
        std::fs::write(served.config(), file).unwrap();
        served.hang_up();
        eventually(&format!("the reload is refused ({why})"), || async {
            served.log().matches("reload of").count() == refusals
        })
        .await;
        let log = served.log();
        let last = log.rsplit("reload of").next().unwrap_or_default();
        assert!(last.contains(why), "{why}:\n{log}");
        let (status, body) =
            raw(&served.gateway, "GET /call/pay/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .await;
        assert_ne!(status, 404, "pay is still served: {body}");
    }
    assert!(
        served.log().contains("remove_systems"),
        "the refusal says how to remove it anyway:\n{}",
        served.log()
    );

    std::fs::write(served.config(), format!("{queue}[serve]\nremove_systems = [\"pay\"]\n")).unwrap();
    served.hang_up();
    eventually("the reload is taken", || async { served.log().contains("configuration reloaded") }).await;
    eventually("the delivery is held", || async {
        served.task(&location).await["last_error"].as_str().is_some_and(|e| e.contains("unknown system"))
    })
    .await;
    let task = served.task(&location).await;
    assert_eq!(task["state"], "pending", "held, not failed: {task}");
}

/// Smaller ones: two keys are refused, the gateway says `Via` and refuses a
/// request that already came through it, and a taken port is said once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_keys_a_loop_and_a_taken_port_are_refused_clearly() {
    let upstream = Upstream::start(|_, _| Reply::status(201)).await;
    let served = Served::start(
        &upstream,
        "",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n",
    );
    let url = format!("{}/call/pay/payments", served.gateway);

    let two = send(client().post(&url), &[("idempotency-key", "a"), ("idempotency-key", "b")]).await;
    assert_eq!(two.status().as_u16(), 400);
    assert_eq!(problem_reason(&two.json().await.unwrap()), "bad_key");
    assert_eq!(upstream.count(), 0);

    let once = client().post(&url).header("idempotency-key", "k-1").send().await.unwrap();
    assert_eq!(once.status().as_u16(), 201);
    assert_eq!(upstream.requests()[0].header("via"), Some("1.1 ballast"));
    let looped = send(client().post(&url), &[("idempotency-key", "k-2"), ("via", "1.1 ballast")]).await;
    assert_eq!(looped.status().as_u16(), 508);
    assert_eq!(problem_reason(&looped.json().await.unwrap()), "loop_detected");
    assert_eq!(upstream.count(), 1, "the looped request was not sent");

    // Another serve on the same admin address: one line says why.
    let taken = served.admin.trim_start_matches("http://").to_owned();
    let out = ballast(&["serve", "--config", served.config().to_str().unwrap(), "--listen", &taken]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("in use").count(), 1, "{stderr}");
}

/// A system with only a base URL runs the guide's composition, and `explain`
/// says each part came from the guide.
#[test]
fn an_unconfigured_system_runs_the_guide_s_composition() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ballast.toml");
    std::fs::write(&file, "[systems.pay]\nbase_url = \"http://127.0.0.1:1/\"\n").unwrap();
    let out = ballast(&["explain", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("retry (3 attempts, exponential backoff"), "{text}");
    assert!(
        text.contains("breaker (count: opens at 50% failures of the last 50 calls, half-open after 30s)"),
        "{text}"
    );
    assert!(text.contains("bulkhead (8 at once, queue 16)"), "{text}");
    assert!(text.contains("timeout (5s per attempt, aggressive)"), "{text}");
    assert_eq!(text.matches("[the guide's default").count(), 4, "{text}");
}
