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
    // The figure the closing note and the README quote (`-- --nocapture`).
    eprintln!("r1: peak RSS {} MiB idle, +{} MiB through 24 answers of 400 MB", idle / MIB, grown / MIB);
    assert!(
        grown < 40 * MIB,
        "the gateway's peak memory grew {} MiB over its idle {} MiB",
        grown / MIB,
        idle / MIB
    );
    let failed = support::queued(served.dir.path())
        .into_iter()
        .filter(|t| t["kind"] == "ballast.http.delivery/pay" && t["state"] == "failed")
        .count();
    assert!(failed >= 4, "a delivery whose answer is too large fails (and alerts), never loops");
}

/// Two systems behind one upstream, `pay` under `/pay/` and `crm` under
/// `/crm/`, both deduplicating, both ordering writes to a customer by
/// `sequence` (a template).
fn two_systems(sequence: &str) -> String {
    let mut text = String::new();
    for system in ["pay", "crm"] {
        text.push_str(&format!(
            r#"
[systems.{system}]
base_url = "http://{{up}}/{system}/"
dedupes_by_key = true
key_ttl = "1h"
bulkhead = "none"

[systems.{system}.retry]
max_attempts = 1

[systems.{system}.routes]
"POST /payments" = "keyed_write"
"PUT /customers/{{id}}" = {{ kind = "keyed_write", sequence = "{sequence}" }}
"#
        ));
    }
    text
}

async fn send(
    served: &Served,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: &str,
    defer: bool,
) -> (u16, String, Value) {
    let mut request = client()
        .request(method, format!("{}/call/{path}", served.gateway))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if defer {
        request = request.header("prefer", "respond-async");
    }
    let answer = request.send().await.unwrap();
    let status = answer.status().as_u16();
    let location =
        answer.headers().get("location").map(|l| l.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, location, answer.json().await.unwrap_or_default())
}

/// R2: a key is the system's own. `pay`'s write waits in the queue under
/// key K; `crm`'s write with K and another body is sent to crm (no 422 for
/// a key crm never saw), and sent again it is crm's (never handed pay's
/// task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_the_same_key_to_another_system_is_that_system_s_write() {
    let upstream = Upstream::start(|seen, _| match seen.target.as_str() {
        "/pay/payments" => Reply::status(503),
        _ => Reply::status(201),
    })
    .await;
    let served = Served::start(&upstream, "", &two_systems("customer/{id}"));
    let post = reqwest::Method::POST;
    let (status, pay_handle, _) =
        send(&served, post.clone(), "pay/payments", "K-1", r#"{"amount":5}"#, true).await;
    assert_eq!(status, 202, "pay is down: its write waits in the queue");

    let (status, _, body) = send(&served, post.clone(), "crm/payments", "K-1", r#"{"amount":6}"#, true).await;
    assert_eq!(status, 201, "no 422: crm never saw K-1: {body}");
    let (status, location, body) = send(&served, post, "crm/payments", "K-1", r#"{"amount":6}"#, true).await;
    assert_eq!(status, 201, "crm's write with pay's key is crm's own: {body}");
    assert_ne!(location, pay_handle, "never pay's task");
    let to_crm = upstream.requests().iter().filter(|s| s.target == "/crm/payments").count();
    assert_eq!(to_crm, 2, "both of crm's writes reached crm");
    let shown = served.task(&pay_handle).await;
    assert_eq!(shown["system"], "pay", "pay's task is still pay's: {shown}");
}

/// R3: sequences are the system's own, spelled as numbers. `crm`'s write
/// to customer 42 fails for good and holds crm's `customer/42`; its alert
/// names the sequence and how to release it. `pay`'s write to customer 42
/// goes out live meanwhile, and crm's `customers/0042` waits behind crm's
/// failed head — the same customer — until `ballast queue release`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r3_a_failed_write_holds_its_own_system_s_sequence_alone() {
    let tried = std::sync::Mutex::new(std::collections::HashSet::new());
    let upstream = Upstream::start(move |seen, _| {
        let key = seen.key().unwrap_or_default().to_owned();
        match seen.target.as_str() {
            "/crm/customers/42" if tried.lock().unwrap().insert(key) => Reply::status(503),
            "/crm/customers/42" => Reply::body(400, r#"{"error":"bad email"}"#),
            _ => Reply::status(200),
        }
    })
    .await;
    let alerts = upstream.url("/alerts");
    let served = Served::start_with(
        &upstream,
        "",
        &format!(
            "[[alerts.webhook]]\nurl_env = \"ALERT_URL\"\nformat = \"json\"\n{}",
            two_systems("customer/{id:int}")
        ),
        &[("ALERT_URL", alerts)],
    );
    let put = reqwest::Method::PUT;
    let (status, failing, _) = send(&served, put.clone(), "crm/customers/42", "crm-v1", "{}", true).await;
    assert_eq!(status, 202);
    eventually("crm's write fails for good", || async { served.task(&failing).await["state"] == "failed" })
        .await;
    let alert = eventually_alert(&upstream).await;
    let summary = alert["summary"].as_str().unwrap();
    assert!(summary.contains("holds sequence crm:customer/42"), "{summary}");
    assert!(summary.contains("ballast queue release"), "{summary}");

    let (status, _, body) = send(&served, put.clone(), "pay/customers/42", "pay-v1", "{}", true).await;
    assert_eq!(status, 200, "pay's customer/42 is not crm's: sent live, {body}");
    let (status, held, body) = send(&served, put, "crm/customers/0042", "crm-v2", "{}", true).await;
    assert_eq!((status, body["deferred_because"].as_str()), (202, Some("sequence_pending")), "{body}");
    assert!(!upstream.requests().iter().any(|s| s.target == "/crm/customers/0042"), "0042 is 42: held");

    let failed_id = failing.trim_start_matches("/tasks/").split('.').next().unwrap().to_owned();
    let db = format!("sqlite://{}", served.dir.path().join("tasks.db").display());
    let released = support::ballast(&["queue", "--db", &db, "release", &failed_id]);
    assert!(released.status.success(), "{}", String::from_utf8_lossy(&released.stderr));
    eventually("the held write goes on", || async { served.task(&held).await["state"] == "completed" }).await;
}

/// The first alert the upstream's `/alerts` received, as JSON.
async fn eventually_alert(upstream: &Upstream) -> Value {
    let alert = || {
        upstream
            .requests()
            .iter()
            .find(|s| s.target == "/alerts")
            .and_then(|s| serde_json::from_str::<Value>(&s.text()).ok())
    };
    eventually("an alert is posted", || async { alert().is_some() }).await;
    alert().unwrap()
}

/// Every byte of the served queue's SQLite files.
fn stored_bytes(served: &Served) -> Vec<u8> {
    std::fs::read_dir(served.dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("tasks.db"))
        .flat_map(|e| std::fs::read(e.path()).unwrap_or_default())
        .collect()
}

/// R4: a reader of the queue's database gets nothing past the seal. The
/// fingerprint is keyed (a SHA-256 of a guessed body does not match it),
/// no access secret is stored (a handle built from the row opens nothing),
/// and the callback URL with its token is sealed — while the caller's
/// handle still shows the task and the callback still arrives with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_a_database_reader_cannot_test_a_body_make_a_handle_or_read_a_callback() {
    let upstream = Upstream::start(|seen, _| match seen.target.as_str() {
        "/hooks" => Reply::status(204),
        _ => Reply::status(503),
    })
    .await;
    let hooks = format!("{}:{}", upstream.addr.ip(), upstream.addr.port());
    let served = Served::start_with(
        &upstream,
        "seal_key_env = \"R4_SEAL_KEY\"\n",
        &format!(
            "callback_hosts = [\"{hooks}\"]\ncallback_secret_env = \"R4_CALLBACK\"\n\n[systems.pay]\n\
             base_url = \"http://{{up}}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n"
        ),
        &[("R4_SEAL_KEY", "ab".repeat(32)), ("R4_CALLBACK", "a-callback-secret-of-some-length".into())],
    );
    let body = r#"{"amount":4200,"cvv":"731"}"#;
    let answer = client()
        .post(format!("{}/call/pay/payments", served.gateway))
        .header("idempotency-key", "r4-1")
        .header("content-type", "application/json")
        .header("authorization", "Bearer caller-a")
        .header("prefer", "respond-async")
        .header("ballast-callback", format!("http://{hooks}/hooks?token=cb-token-r4"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 202);
    let handle = answer.headers()["location"].to_str().unwrap().trim_start_matches("/tasks/").to_owned();

    let rows = support::queued(served.dir.path());
    let row = rows.iter().find(|t| t["key"] == "r4-1").expect("the deferred write");
    let payload = &row["payload"];
    let guessed = ballast_http::Fingerprint::of(
        &ballast_http::Request::post("payments").header("content-type", "application/json").body(body),
    );
    let stored = payload["fingerprint"].as_str().unwrap_or_default();
    assert!(
        !stored.is_empty() && stored != guessed.as_str(),
        "a guessed body does not test against {stored}"
    );
    assert!(stored.starts_with("k:"), "keyed: {stored}");
    let bytes = stored_bytes(&served);
    assert!(!bytes.windows(11).any(|w| w == b"cb-token-r4"), "the callback's token is sealed");
    assert!(!bytes.windows(8).any(|w| w == b"caller-a"), "the caller's token is sealed");
    if let Some(access) = payload["access"].as_str() {
        let built = format!("{}/tasks/{}.{access}", served.gateway, row["id"]);
        assert_eq!(client().get(built).send().await.unwrap().status(), 404, "a handle built from the row");
    }
    assert!(payload.get("access").is_none(), "no access secret is stored: {payload}");

    let shown = served.task(&format!("/tasks/{handle}")).await;
    assert_eq!(shown["state"], "pending", "the caller's handle shows its task: {shown}");
    upstream.rescript(|_, _| Reply::status(201));
    eventually("the callback arrives", || async {
        upstream.requests().iter().any(|s| s.target == "/hooks?token=cb-token-r4")
    })
    .await;
    let callback = upstream.requests().into_iter().find(|s| s.target.starts_with("/hooks")).unwrap();
    assert_eq!(
        callback.header("ballast-task"),
        Some(handle.as_str()),
        "the callback names the caller's handle"
    );
    let bytes = stored_bytes(&served);
    assert!(!bytes.windows(11).any(|w| w == b"cb-token-r4"), "nor is it stored with the callback task");
}

/// R5: a join asks who is asking. Caller B, without A's token, sends A's
/// key and body while A's write is in flight: B's request goes to the
/// system on its own (B never sees A's answer echoing A's token). Then A's
/// write waits in the queue, and B's same request is not handed A's task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_another_caller_with_the_same_key_is_never_joined() {
    let upstream = Upstream::start(|seen, _| {
        let echo = format!(r#"{{"auth":"{}"}}"#, seen.header("authorization").unwrap_or(""));
        match seen.target.as_str() {
            "/slow" => Reply::body(201, echo).after(Duration::from_millis(600)),
            _ => Reply::status(503),
        }
    })
    .await;
    let served = Served::start_with(
        &upstream,
        "seal_key_env = \"R5_SEAL_KEY\"\n",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n",
        &[("R5_SEAL_KEY", "cd".repeat(32))],
    );
    // A key names one request for its life: the deferred half shares another.
    let call = |path: &'static str, auth: Option<&'static str>, defer: bool| {
        let gateway = served.gateway.clone();
        async move {
            let mut request = client()
                .post(format!("{gateway}/call/pay/{path}"))
                .header("idempotency-key", format!("shared-key-{path}"))
                .body(r#"{"amount":1}"#);
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            if defer {
                request = request.header("prefer", "respond-async");
            }
            let answer = request.send().await.unwrap();
            let location = answer.headers().get("location").map(|l| l.to_str().unwrap().to_owned());
            (answer.status().as_u16(), location, answer.text().await.unwrap_or_default())
        }
    };
    let a = tokio::spawn(call("slow", Some("Bearer token-of-a"), false));
    eventually("A's write is in flight", || async { upstream.count() == 1 }).await;
    let (status, _, body) = call("slow", None, false).await;
    assert!(!body.contains("token-of-a"), "B never gets A's answer: {status} {body}");
    assert_eq!(upstream.count(), 2, "B's request went to the system on its own");
    assert!(a.await.unwrap().2.contains("token-of-a"), "A gets its own answer");

    let (status, a_handle, _) = call("later", Some("Bearer token-of-a"), true).await;
    assert_eq!(status, 202);
    let (status, b_handle, body) = call("later", None, true).await;
    assert!(b_handle.is_none() || b_handle != a_handle, "B is not handed A's task: {status} {body}");
    assert!(!body.contains(a_handle.as_deref().unwrap().trim_start_matches("/tasks/")), "{body}");
    let from_b = upstream
        .requests()
        .iter()
        .filter(|s| s.target == "/later" && s.header("authorization").is_none())
        .count();
    assert_eq!(from_b, 1, "B's request went its own way");
    let (status, again, _) = call("later", Some("Bearer token-of-a"), true).await;
    assert_eq!((status, again), (202, a_handle), "A's own retry still joins its task");
}

/// C7: a periodic task every second whose calls take 400 ms, all missed
/// periods caught up (`catch_up = "all"`); the process is paused for 4 s,
/// as an outage looks to it. Caught up, the missed periods run one after
/// another, never side by side: no call starts before the one before it
/// was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c7_missed_periods_caught_up_never_overlap() {
    let arrivals: Arc<std::sync::Mutex<Vec<std::time::Instant>>> = Arc::default();
    let log = Arc::clone(&arrivals);
    let upstream = Upstream::start(move |seen, _| {
        if seen.target == "/ticks" {
            log.lock().unwrap().push(std::time::Instant::now());
        }
        Reply::status(201).after(Duration::from_millis(400))
    })
    .await;
    let served = Served::start(
        &upstream,
        "[queue.periodic.tick]\nsystem = \"pay\"\nmethod = \"POST\"\npath = \"ticks\"\nevery = \"1s\"\n\
         max_attempts = 1\ncatch_up = \"all\"\n",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nbulkhead = \"none\"\n\
         retry = \"none\"\n\n[systems.pay.timeout]\nattempt = \"2s\"\n",
    );
    eventually("the periodic task runs", || async { arrivals.lock().unwrap().len() >= 2 }).await;
    let pid = served.child.id().to_string();
    let signal = |which: &str| {
        assert!(std::process::Command::new("kill").args([which, &pid]).status().unwrap().success());
    };
    signal("-STOP");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let resumed = std::time::Instant::now();
    signal("-CONT");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after: Vec<std::time::Instant> =
        arrivals.lock().unwrap().iter().copied().filter(|at| *at >= resumed).collect();
    assert!(after.len() >= 3, "the missed periods are caught up: {} calls", after.len());
    let gaps: Vec<Duration> = after.windows(2).map(|w| w[1].duration_since(w[0])).collect();
    assert!(
        gaps.iter().all(|gap| *gap >= Duration::from_millis(390)),
        "a period started before the one before it was answered (400 ms each): gaps {gaps:?}"
    );
}

/// R6: callbacks go only where the operator listed, never back in. A
/// callback to the gateway's own `/call/pay/payments` (its host and port
/// listed) and one to port 22 of a host listed without a port are refused
/// 400 `bad_callback`; a listed receiver gets its callback marked
/// `Via: 1.1 ballast`, its signed body naming the receiver and the system.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_a_callback_cannot_be_aimed_back_in_or_at_another_port() {
    let tried = std::sync::Mutex::new(std::collections::HashSet::new());
    let upstream = Upstream::start(move |seen, _| match seen.target.as_str() {
        "/hooks" => Reply::status(204),
        _ if tried.lock().unwrap().insert(seen.key().unwrap_or_default().to_owned()) => Reply::status(503),
        _ => Reply::status(201),
    })
    .await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gw_port = free.local_addr().unwrap().port();
    drop(free);
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[queue]\nurl = \"sqlite://{db}\"\npoll_interval = \"100ms\"\n\n[gateway]\nlisten = \"127.0.0.1:{gw_port}\"\n\
         callback_hosts = [\"127.0.0.1\", \"127.0.0.1:{gw_port}\", \"{up}\"]\ncallback_secret_env = \"R6_SECRET\"\n\n\
         [systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nretry = \"none\"\n",
        db = dir.path().join("tasks.db").display(),
        up = upstream.addr,
    );
    let served = Served::start_text(&text, &[("R6_SECRET", "a-callback-secret-for-r6".into())]);
    let defer = |key: &'static str, callback: String| {
        let gateway = served.gateway.clone();
        async move {
            let answer = client()
                .post(format!("{gateway}/call/pay/payments"))
                .header("idempotency-key", key)
                .header("prefer", "respond-async")
                .header("ballast-callback", callback)
                .body("{}")
                .send()
                .await
                .unwrap();
            (answer.status().as_u16(), answer.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, body) = defer("r6-own", format!("http://127.0.0.1:{gw_port}/call/pay/payments")).await;
    assert_eq!((status, body["ballast"]["reason"].as_str()), (400, Some("bad_callback")), "{body}");
    let (status, body) = defer("r6-ssh", "http://127.0.0.1:22/x".to_owned()).await;
    assert_eq!((status, body["ballast"]["reason"].as_str()), (400, Some("bad_callback")), "{body}");

    let receiver = format!("http://{}/hooks", upstream.addr);
    let (status, _) = defer("r6-ok", format!("{receiver}?token=r6")).await;
    assert_eq!(status, 202);
    eventually("the callback arrives", || async {
        upstream.requests().iter().any(|s| s.target.starts_with("/hooks"))
    })
    .await;
    let callback = upstream.requests().into_iter().find(|s| s.target.starts_with("/hooks")).unwrap();
    assert_eq!(callback.header("via"), Some("1.1 ballast"));
    let event: Value = serde_json::from_str(&callback.text()).unwrap();
    assert_eq!(
        (event["to"].as_str(), event["system"].as_str()),
        (Some(receiver.as_str()), Some("pay")),
        "{event}"
    );
    let looped = client()
        .post(format!("{}/call/pay/payments", served.gateway))
        .header("via", "1.1 ballast")
        .header("idempotency-key", "r6-loop")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(looped.status().as_u16(), 508, "a callback that reached a gateway is refused");
    assert!(
        !upstream.requests().iter().any(|s| s.key() == Some("r6-own") || s.key() == Some("r6-loop")),
        "nothing reached pay on behalf of a callback"
    );
}

/// R8: streamed answers that never end, against a bulkhead of 2. Two
/// callers take a 400 MB report and stop reading it; a third is refused
/// `bulkhead_full` while they hold it. At the stream timeout (3 s) both are
/// cut off — though nobody reads them — and the next caller is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_a_stream_holds_a_bulkhead_slot_until_it_ends_within_its_timeout() {
    let upstream = Upstream::start(|_, _| Reply::large(200, HUGE).chunked()).await;
    let served = Served::start(
        &upstream,
        "",
        "[systems.pay]\nbase_url = \"http://{up}/\"\nretry = \"none\"\n\n[systems.pay.bulkhead]\nlimit = 2\n\n\
         [systems.pay.timeout]\nattempt = \"2s\"\nread = \"2s\"\nstream = \"3s\"\n",
    );
    let report = || client().get(format!("{}/call/pay/report", served.gateway)).send();
    // Their heads came; their bodies are left unread.
    let first = report().await.unwrap();
    let second = report().await.unwrap();
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200));
    let third = report().await.unwrap();
    let status = third.status().as_u16();
    let body: Value = third.json().await.unwrap_or_default();
    assert_eq!(
        (status, body["ballast"]["reason"].as_str()),
        (503, Some("bulkhead_full")),
        "two streams hold the bulkhead of 2: {body}"
    );
    let cut_at = std::time::Instant::now() + Duration::from_secs(3);
    eventually("a stream's slot comes back at its timeout", || async {
        report().await.is_ok_and(|answer| answer.status() == 200)
    })
    .await;
    assert!(
        std::time::Instant::now() >= cut_at - Duration::from_millis(500),
        "a slot came back before the timeout"
    );
    // What the held streams pass on ends cut off, never looking whole.
    let read = tokio::time::timeout(Duration::from_secs(10), first.bytes()).await;
    assert!(read.is_ok_and(|body| body.is_err()), "the unread stream was cut off");
    drop(second);
}

/// R9: a flood of wrong tokens from 120 addresses (past the listener's
/// bucket of 50) interleaved with the right token from 18 new addresses:
/// every right one is let through, the flood is answered 401 and 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_the_right_token_gets_through_a_guessing_flood() {
    const TOKEN: &str = "r9-the-right-token-0123456789";
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = Served::start_with(
        &upstream,
        "",
        "token_env = \"R9_TOKEN\"\n\n[systems.pay]\nbase_url = \"http://{up}/\"\n",
        &[("R9_TOKEN", TOKEN.to_owned())],
    );
    let url = format!("{}/call/pay/orders", served.gateway);
    let mut guesses = std::collections::HashMap::<u16, usize>::new();
    let mut admitted = Vec::new();
    for n in 0..120u8 {
        let guess = from(1, n).get(&url).bearer_auth(format!("guess-{n}")).send().await.unwrap();
        *guesses.entry(guess.status().as_u16()).or_default() += 1;
        if n % 7 == 6 {
            let right = from(2, n).get(&url).bearer_auth(TOKEN).send().await.unwrap();
            admitted.push(right.status().as_u16());
        }
    }
    assert!(guesses.get(&429).copied().unwrap_or(0) > 0, "the flood was slowed: {guesses:?}");
    assert_eq!(admitted.len(), 17);
    let last = from(3, 1).get(&url).bearer_auth(TOKEN).send().await.unwrap();
    admitted.push(last.status().as_u16());
    assert!(admitted.iter().all(|s| *s == 200), "every right token got in during the flood: {admitted:?}");
}

/// A client whose requests come from 127.0.a.b.
fn from(a: u8, b: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, a, b]))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// R10: `?wait=` places shared out. With `max_waiters = 16`, one address
/// takes 12 (three quarters: 8 on one task, the most a task takes, and 4
/// on another) and its thirteenth is refused at once, while another address
/// still gets one of the places kept for others; a task's ninth caller is
/// refused while another task still takes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_one_caller_cannot_take_every_waiting_place() {
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let served = Served::start(
        &upstream,
        "",
        "max_waiters = 16\n\n[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n\
         breaker = \"none\"\n\n[systems.pay.retry]\nmax_attempts = 1\n",
    );
    let mut handles = Vec::new();
    for key in ["r10-a", "r10-b", "r10-c"] {
        let (status, _, body) = send(&served, reqwest::Method::POST, "pay/orders", key, "{}", true).await;
        assert_eq!(status, 202, "{body}");
        handles.push(body["task_id"].as_str().unwrap().to_owned());
    }
    let url = |handle: &str| format!("{}/tasks/{handle}?wait=60s", served.gateway);
    let hold = |client: reqwest::Client, handle: &str| tokio::spawn(client.get(url(handle)).send());
    let refused = |client: reqwest::Client, handle: String| async move {
        let answer = client.get(url(&handle)).send().await.unwrap();
        let status = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap_or_default();
        (status, body["ballast"]["reason"].as_str().unwrap_or_default().to_owned(), body)
    };
    let settle = || tokio::time::sleep(Duration::from_millis(500));

    let mut held: Vec<_> = (0..8).map(|_| hold(from(1, 1), &handles[0])).collect();
    held.extend((0..4).map(|_| hold(from(1, 1), &handles[1])));
    settle().await;
    let (status, reason, body) = refused(from(1, 1), handles[2].clone()).await;
    assert_eq!((status, reason.as_str()), (503, "too_many_waiters"), "an address's thirteenth place: {body}");
    assert!(body["detail"].as_str().unwrap().contains("your address"), "{body}");

    let (status, reason, body) = refused(from(1, 2), handles[0].clone()).await;
    assert_eq!((status, reason.as_str()), (503, "too_many_waiters"), "a task's ninth caller: {body}");
    assert!(body["detail"].as_str().unwrap().contains("this task"), "{body}");

    held.push(hold(from(1, 2), &handles[1]));
    held.push(hold(from(1, 3), &handles[2]));
    settle().await;
    assert!(held.iter().all(|call| !call.is_finished()), "every place given is held");
    held.iter().for_each(tokio::task::JoinHandle::abort);
}

/// R11: a process of the same user binds the gateway's port with
/// `SO_REUSEPORT` once the gateway serves — which the kernel lets it do —
/// and gets no connection: 60 callers, each on a connection of its own,
/// are all answered by the gateway.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_a_socket_joining_the_gateway_s_port_gets_no_connection() {
    use socket2::{Domain, Socket, Type};
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let served = Served::start(
        &upstream,
        "",
        "workers = 2\n\n[systems.pay]\nbase_url = \"http://{up}/\"\nbulkhead = \"none\"\n",
    );
    let addr: std::net::SocketAddr = served.gateway.trim_start_matches("http://").parse().unwrap();
    let hijack = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    hijack.set_reuse_address(true).unwrap();
    hijack.set_reuse_port(true).unwrap();
    hijack.bind(&addr.into()).expect("the kernel lets a process of the same user join the port");
    hijack.listen(128).unwrap();
    hijack.set_nonblocking(true).unwrap();

    let calls = (0..60).map(|_| {
        let url = format!("{}/call/pay/orders", served.gateway);
        async move {
            // A client of its own: a connection of its own.
            let client = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
            client.get(url).send().await.map(|a| a.status().as_u16()).unwrap_or(0)
        }
    });
    let statuses = futures_util::future::join_all(calls).await;
    let taken = std::iter::from_fn(|| hijack.accept().ok()).count();
    assert_eq!(taken, 0, "the joined socket took connections");
    assert!(statuses.iter().all(|s| *s == 200), "every caller was answered by the gateway: {statuses:?}");
}

/// R12: a periodic task name that cannot make its periods' keys (a space,
/// a name of 300 characters) is an error of `ballast lint`, naming the
/// section, as `ballast serve` refuses it; a good name passes both.
#[test]
fn r12_lint_refuses_the_periodic_names_serve_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let long = "n".repeat(300);
    for (name, ok) in [("nightly-report", true), ("\"nightly report\"", false), (long.as_str(), false)] {
        let text = format!(
            "[queue]\nurl = \"sqlite://{}/tasks.db\"\n\n[queue.periodic.{name}]\nsystem = \"pay\"\nmethod = \"POST\"\n\
             path = \"ticks\"\nevery = \"1h\"\nmax_attempts = 1\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
             [systems.pay]\nbase_url = \"http://127.0.0.1:9/\"\ndedupes_by_key = true\nkey_ttl = \"24h\"\n",
            dir.path().display()
        );
        let file = dir.path().join("ballast.toml");
        std::fs::write(&file, text).unwrap();
        let file = file.display().to_string();
        let lint = support::ballast(&["lint", &file]);
        let said = String::from_utf8_lossy(&lint.stdout).into_owned();
        assert_eq!(lint.status.success(), ok, "lint of {name:?}: {said}");
        if ok {
            continue;
        }
        assert!(said.contains("does not make its periods' task keys"), "lint names why: {said}");
        // What serve refuses, with the same words.
        let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_ballast"))
            .args(["serve", "--config", &file, "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = serve.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "serve started with {name:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut refused = String::new();
        std::io::Read::read_to_string(serve.stderr.as_mut().unwrap(), &mut refused).unwrap();
        assert_eq!(status.code(), Some(1), "{refused}");
        assert!(refused.contains("does not make its periods' task keys"), "serve names why: {refused}");
    }
}

/// R13: a replica row whose host, version and admin address carry terminal
/// escapes (a clear screen, a window title, a line break forging a second
/// replica) is printed by `ballast fleet` with them shown, not obeyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_ballast_fleet_shows_a_replica_s_control_characters_instead_of_obeying_them() {
    let Some(url) = support::pg_queue("r13").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ballast.toml");
    std::fs::write(
        &file,
        format!("[queue]\nurl = \"{url}\"\n\n[systems.pay]\nbase_url = \"http://127.0.0.1:9/\"\n"),
    )
    .unwrap();
    let file = file.display().to_string();
    let first = support::ballast(&["fleet", "--config", &file]);
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO ballast_fleet_replicas (id, host, pid, version, config_digest, admin) \
         VALUES ('7b0e2c43-8f54-4a57-9d6c-0d9a3b8e1f01', $1, 7, $2, 'abc', $3)",
    )
    .bind("web-1\u{1b}[2J\u{1b}]0;owned\u{7}")
    .bind("0.1.0\nlive 000000000000  fake:1")
    .bind("http://10.0.0.1:9464\u{9b}31m")
    .execute(&pool)
    .await
    .unwrap();
    let shown = support::ballast(&["fleet", "--config", &file]);
    let text = String::from_utf8(shown.stdout).unwrap();
    assert!(shown.status.success());
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal: {text:?}"
    );
    assert_eq!(text.lines().count(), 1, "one replica, one line: {text}");
    assert!(text.contains("web-1\\u{1b}[2J"), "{text}");
    assert!(text.contains("\\u{a}live"), "{text}");
    assert!(text.contains("9464\\u{9b}31m"), "{text}");
}

/// R14: `[serve] tls_cert_file` and `tls_key_file` put both listeners on
/// TLS — the gateway takes `[serve]`'s certificate — a plain HTTP request
/// gets no answer, the dashboard's session cookie is `Secure`, and lint
/// warns of a listener beyond loopback without TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_both_listeners_speak_tls_and_the_session_cookie_is_secure() {
    const TOKEN: &str = "r14-admin-token-0123456789";
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = ballast_test_support::pki::Ca::new("r14 CA");
    let (cert, key) = ca.server(&["127.0.0.1", "localhost"]).write(dir.path(), "serve");
    let text = format!(
        "[queue]\nurl = \"sqlite://{}/tasks.db\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\ntoken_env = \"R14_TOKEN\"\n\
         tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
         [systems.pay]\nbase_url = \"http://{}/\"\n",
        dir.path().display(),
        cert.display(),
        key.display(),
        upstream.addr
    );
    let served = Served::start_text(&text, &[("R14_TOKEN", TOKEN.to_owned())]);
    assert!(
        served.admin.starts_with("https://") && served.gateway.starts_with("https://"),
        "{}",
        served.gateway
    );
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let call = trusting.get(format!("{}/call/pay/orders", served.gateway)).send().await.unwrap();
    assert_eq!(call.status(), 200);
    let ready = trusting.get(format!("{}/health/live", served.admin)).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    let plain = client()
        .get(format!("{}/call/pay/orders", served.gateway.replace("https://", "http://")))
        .send()
        .await;
    assert!(plain.is_err(), "plain HTTP got an answer: {:?}", plain.map(|a| a.status()));

    let login = trusting
        .post(format!("{}/ui/login", served.admin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    let cookie =
        login.headers().get("set-cookie").map(|c| c.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(cookie.contains("; Secure"), "the session cookie: {cookie:?}");

    let open = dir.path().join("open.toml");
    std::fs::write(
        &open,
        "[gateway]\nlisten = \"0.0.0.0:9465\"\ntoken_env = \"GW_TOKEN\"\n\n[systems.pay]\nbase_url = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let lint = support::ballast(&["lint", &open.display().to_string()]);
    let said = String::from_utf8_lossy(&lint.stdout).into_owned();
    assert!(said.contains("beyond this host over plain HTTP"), "lint warns: {said}");
}
