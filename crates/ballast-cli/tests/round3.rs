//! Round 3 of the attacks on `ballast serve`, each through the real binary
//! on loopback, each failing on the version before its fix: the finding's
//! id names the test.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ballast_test_support::{eventually, Reply, Upstream};
use serde_json::Value;
use support::{client, Served};

/// 400 MB: the size of an answer meant to take the gateway down.
const HUGE: u64 = 400_000_000;

/// The peak resident memory of process `pid` so far, in bytes (`VmHWM`).
fn peak(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

const MIB: u64 = 1 << 20;

/// R1: four 400 MB answers at once on every path that reads an answer
/// whole — a live keyed write, a deferred write's delivery, a followed
/// status, a periodic call, an alert webhook — and the gateway's memory
/// stays within a few buffers of its idle size; a live keyed write's caller
/// learns the answer was too large and that the write was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_answers_of_400_mb_on_every_whole_read_path_leave_the_memory_alone() {
    // Half the answers say their length, half are chunked: both are stopped.
    // A deferred write's first send meets a 503, so it goes to the queue.
    let sent_once = std::sync::Mutex::new(std::collections::HashSet::new());
    let upstream = Upstream::start(move |seen, n| {
        let large = |status| {
            if n % 2 == 0 {
                Reply::large(status, HUGE)
            } else {
                Reply::large(status, HUGE).chunked()
            }
        };
        match seen.target.as_str() {
            "/payments" | "/ticks" | "/alerts" => large(201),
            "/deferred" if sent_once.lock().unwrap().insert(seen.key().unwrap_or_default().to_owned()) => {
                Reply::status(503)
            }
            "/deferred" => large(201),
            "/orders" => Reply::status(202).header("location", &format!("/status/{n}")),
            _ if seen.target.starts_with("/status/") => large(200),
            _ => Reply::status(404),
        }
    })
    .await;
    let alerts = upstream.url("/alerts");
    let served = Served::start_with(
        &upstream,
        "[queue.periodic.tick]\nsystem = \"pay\"\nmethod = \"POST\"\npath = \"ticks\"\nevery = \"6s\"\nmax_attempts = 1\n",
        r#"
[[alerts.webhook]]
url_env = "ALERT_URL"
format = "json"

[systems.pay]
base_url = "http://{up}/"
dedupes_by_key = true
key_ttl = "1h"
bulkhead = "none"

[systems.pay.retry]
max_attempts = 1

[systems.pay.timeout]
attempt = "5s"

[systems.pay.routes]
"POST /payments" = "keyed_write"
"POST /deferred" = "keyed_write"
"POST /orders" = { kind = "keyed_write", follow = {} }
"GET /status/{id}" = "read"
"POST /ticks" = "keyed_write"
"#,
        &[("ALERT_URL", alerts)],
    );
    let pid = served.child.id();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let idle = peak(pid);
    let gateway = Arc::new(served.gateway.clone());
    let post = |path: &'static str, key: String, defer: bool| {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move {
            let mut request =
                client().post(format!("{gateway}/call/pay/{path}")).header("idempotency-key", key).body("{}");
            if defer {
                request = request.header("prefer", "respond-async");
            }
            let answer = request.send().await.unwrap();
            (answer.status().as_u16(), answer.json::<Value>().await.unwrap_or_default())
        })
    };
    let live: Vec<_> = (0..4).map(|i| post("payments", format!("pay-{i}"), false)).collect();
    let deferred: Vec<_> = (0..4).map(|i| post("deferred", format!("later-{i}"), true)).collect();
    let followed: Vec<_> = (0..4).map(|i| post("orders", format!("order-{i}"), true)).collect();
    for call in live {
        let (status, body) = call.await.unwrap();
        assert_eq!((status, body["ballast"]["reason"].as_str()), (502, Some("answer_too_large")), "{body}");
        assert_eq!(body["ballast"]["sent"], true, "the write was sent: {body}");
        assert!(body["detail"].as_str().unwrap().contains("same key"), "{body}");
    }
    for call in deferred.into_iter().chain(followed) {
        assert_eq!(call.await.unwrap().0, 202);
    }
    eventually("every path met its large answers", || async {
        let seen = upstream.requests();
        let count = |prefix: &str| seen.iter().filter(|s| s.target.starts_with(prefix)).count();
        count("/deferred") >= 8 && count("/status/") >= 4 && count("/ticks") >= 1 && count("/alerts") >= 4
    })
    .await;
    let grown = peak(pid).saturating_sub(idle);
    assert!(
        grown < 40 * MIB,
        "the gateway's peak memory grew {} MiB over its idle {} MiB",
        grown / MIB,
        idle / MIB
    );
    let failed = support::queued(served.dir.path())
        .into_iter()
        .filter(|t| t["kind"] == "ballast.http.delivery" && t["state"] == "failed")
        .count();
    assert!(failed >= 4, "a delivery whose answer is too large fails (and alerts), never loops");
}
