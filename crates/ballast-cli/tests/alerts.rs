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
use ballast_test_support::{Reply, Upstream};

const FAILING: usize = 30;

/// What the webhook took: accepted alerts (key → the failed task's id from
/// the body) and posts whose key was already accepted (deduplicated,
/// answered 200).
#[derive(Default)]
struct Inbox {
    accepted: HashMap<String, i64>,
    repeats: usize,
}

/// The flaky webhook that deduplicates by key; of every six posts, one is
/// refused with 503, one is answered 503 after longer than the webhook's
/// attempt timeout, and one is taken but its answer lost.
async fn webhook(inbox: Arc<Mutex<Inbox>>) -> Upstream {
    Upstream::start(move |seen, n| {
        match n % 6 {
            1 => return Reply::status(503),
            // Longer than the webhook's attempt timeout.
            5 => return Reply::status(503).after(Duration::from_secs(5)),
            _ => {}
        }
        let alert: serde_json::Value = serde_json::from_slice(&seen.body).unwrap_or_default();
        let task = alert["task"]["id"].as_i64().unwrap_or(-1);
        let mut inbox = inbox.lock().unwrap();
        match inbox.accepted.entry(seen.key().unwrap_or_default().to_owned()) {
            Entry::Occupied(_) => inbox.repeats += 1,
            Entry::Vacant(new) => {
                new.insert(task);
            }
        }
        if n % 6 == 3 {
            // Taken, but the answer never arrives.
            Reply::Lost
        } else {
            Reply::status(200)
        }
    })
    .await
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
    // Refuses every charge: each delivery fails for good at once.
    let refusing = Upstream::start(|_, _| Reply::status(422)).await;
    let upstream = refusing.url("");
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let receiver = webhook(Arc::clone(&inbox)).await;
    let hook = receiver.url("/hook");
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
    let posts = receiver.count();
    assert!(posts > FAILING, "the webhook was flaky: {posts} posts");
}
