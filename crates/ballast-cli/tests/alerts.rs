//! Every failure alerted exactly once (R-RES-RE-5), through a flaky webhook
//! and `ballast serve` killed with SIGKILL twice while alerts are in flight.
//!
//! The webhook deduplicates by `Idempotency-Key`, as `dedupes_by_key = true`
//! promises: it answers 503 to some posts, takes others and then drops the
//! connection before answering (the alert arrived, ballast cannot know), and
//! sits on others past ballast's attempt timeout. The alert is stored with
//! the failure, so neither a crash nor a lost answer can lose one; its key is
//! the failure's, so no redelivery counts twice.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_http::{Delivery, Request};
use ballast_queue::{ListFilter, Queue, TaskState};
use ballast_server::alerts::ALERT_KIND;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const FAILING: usize = 30;

/// What the webhook received.
#[derive(Default)]
struct Inbox {
    /// Posts read, in order.
    posts: usize,
    /// Accepted alerts: key → the failed task's id from the body.
    accepted: HashMap<String, i64>,
    /// Posts whose key was already accepted (deduplicated, answered 200).
    repeats: usize,
}

/// One request's head and body, read from `socket`.
async fn read_request(socket: &mut TcpStream) -> Option<(HashMap<String, String>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let headers: HashMap<String, String> = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((headers, buf[head_end..head_end + length].to_vec()))
}

async fn reply(socket: &mut TcpStream, status: u16) {
    let out = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    let _ = socket.write_all(out.as_bytes()).await;
    let _ = socket.shutdown().await;
}

/// The flaky webhook that deduplicates by key; one post in six fails in each
/// of three ways.
async fn webhook(inbox: Arc<Mutex<Inbox>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let inbox = Arc::clone(&inbox);
            tokio::spawn(async move {
                let Some((headers, body)) = read_request(&mut socket).await else { return };
                let key = headers.get("idempotency-key").cloned().unwrap_or_default();
                let alert: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let task = alert["task"]["id"].as_i64().unwrap_or(-1);
                let n = {
                    let mut inbox = inbox.lock().unwrap();
                    inbox.posts += 1;
                    inbox.posts
                };
                match n % 6 {
                    1 => return reply(&mut socket, 503).await,
                    5 => {
                        // Longer than the webhook's attempt timeout.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        return reply(&mut socket, 503).await;
                    }
                    _ => {}
                }
                {
                    let mut inbox = inbox.lock().unwrap();
                    match inbox.accepted.entry(key) {
                        Entry::Occupied(_) => inbox.repeats += 1,
                        Entry::Vacant(new) => {
                            new.insert(task);
                        }
                    }
                }
                if n % 6 == 3 {
                    // Taken, but the answer never arrives.
                    return;
                }
                reply(&mut socket, 200).await;
            });
        }
    });
    format!("http://{addr}/hook")
}

/// An upstream that refuses every charge: each delivery fails for good at once.
async fn refusing_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                if read_request(&mut socket).await.is_some() {
                    reply(&mut socket, 422).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

fn serve(dir: &Path, hook: &str, run: usize) -> Child {
    let log = std::fs::File::create(dir.join(format!("serve-{run}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_ballast"))
        .args(["serve", "--config"])
        .arg(dir.join("ballast.toml"))
        .env("ALERT_URL", hook)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("ballast serve starts")
}

async fn until(what: &str, inbox: &Mutex<Inbox>, done: impl Fn(&Inbox) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !done(&inbox.lock().unwrap()) {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failure_is_alerted_exactly_once_across_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("queue.db");
    let url = format!("sqlite://{}", db.display());
    let upstream = refusing_upstream().await;
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let hook = webhook(Arc::clone(&inbox)).await;
    std::fs::write(
        dir.path().join("ballast.toml"),
        format!(
            r#"[queue]
url = "{url}"
poll_interval = "100ms"
lease = "1s"

[serve]
listen = "127.0.0.1:0"

[[alerts.webhook]]
url_env = "ALERT_URL"
format = "json"
dedupes_by_key = true
timeout = "500ms"

[systems.pay]
base_url = "{upstream}"
dedupes_by_key = true
key_ttl = "7d"
"#
        ),
    )
    .unwrap();

    let queue = Queue::connect(&url).await.unwrap();
    queue.migrate().await.unwrap();
    let mut failing = BTreeSet::new();
    for order in 0..FAILING {
        let request = Request::post("charges").json(&serde_json::json!({ "order": order }));
        let task = Delivery::from_request("pay", &request).unwrap().task(&IdempotencyKey::v7());
        failing.insert(queue.enqueue(task).await.unwrap().id);
    }

    // Killed twice while alerts are being posted, then left to finish.
    for (run, accepted) in [(1, FAILING / 4), (2, FAILING / 2)] {
        let mut child = serve(dir.path(), &hook, run);
        until("alerts are being accepted", &inbox, |i| i.accepted.len() >= accepted).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let mut child = serve(dir.path(), &hook, 3);
    until("every failure is alerted", &inbox, |i| i.accepted.len() >= FAILING).await;
    let alerts = ListFilter::default().kind(ALERT_KIND);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let open = queue.list(&alerts.clone().limit(1000)).await.unwrap();
        if open.iter().all(|t| t.state == TaskState::Completed) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "alert tasks never finished: {open:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let failed = queue.list(&ListFilter::default().state(TaskState::Failed).limit(1000)).await.unwrap();
    let inbox = inbox.lock().unwrap();
    assert_eq!(
        failed.iter().map(|t| t.id).collect::<BTreeSet<_>>(),
        failing,
        "every delivery failed for good"
    );
    let alerted: Vec<i64> = inbox.accepted.values().copied().collect();
    assert_eq!(alerted.len(), FAILING, "one accepted alert per failure: {alerted:?}");
    assert_eq!(alerted.iter().copied().collect::<BTreeSet<_>>(), failing, "each failure alerted once");
    assert!(inbox.repeats > 0, "some alert was posted again after its answer was lost");
    assert!(inbox.posts > FAILING, "the webhook was flaky: {} posts", inbox.posts);
}
