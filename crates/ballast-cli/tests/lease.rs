//! A lost lease stops its side effect (round 3's C4 and C6), through real
//! `ballast serve` processes on one PostgreSQL (when `BALLAST_TEST_PG` is
//! set): a worker paused past its lease sends nothing once it resumes, and
//! a worker cut from the database while its leases run out stops sending
//! before its next request. What is checked is what the upstream saw.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast::IdempotencyKey;
use ballast_http::{Delivery, Request};
use ballast_queue::Queue;
use ballast_test_support::{eventually, Reply, Upstream};
use support::Served;

fn config(queue_url: &str, upstream: &Upstream, system: &str) -> String {
    format!(
        r#"[queue]
url = "{queue_url}"
poll_interval = "100ms"
lease = "1s"

[gateway]
listen = "127.0.0.1:0"

[systems.pay]
base_url = "http://{up}/"
dedupes_by_key = true
key_ttl = "1h"
{system}
"#,
        up = upstream.addr
    )
}

/// Stores a delivery of `PUT customers/42` with `key`, in `sequence` if any.
async fn store(queue: &Queue, key: &str, sequence: Option<&str>) {
    let request = Request::put("customers/42").body(format!(r#"{{"v":"{key}"}}"#));
    let mut task =
        Delivery::from_request("pay", &request).unwrap().task(&IdempotencyKey::parse(key).unwrap());
    if let Some(sequence) = sequence {
        task = task.sequence(sequence);
    }
    queue.enqueue(task).await.unwrap();
}

fn signal(served: &Served, signal: &str) {
    let sent = std::process::Command::new("kill").args([signal, &served.child.id().to_string()]).status();
    assert!(sent.unwrap().success());
}

/// C4: replica A sends write 1 of a sequence and is paused (SIGSTOP) while
/// the upstream holds its answer; its lease runs out, replica B takes the
/// task, delivers write 1 and then write 2. A resumes, reads its 503 and
/// would try write 1 again: its lease is gone, so nothing leaves. The
/// upstream sees write 1 never after write 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_a_worker_paused_past_its_lease_sends_nothing_when_it_resumes() {
    let Some(queue_url) = support::pg_queue("c4").await else { return };
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    let upstream = Upstream::start(move |request, _| {
        let key = request.key().unwrap_or_default().to_owned();
        let mut log = log.lock().unwrap();
        let first = !log.contains(&key);
        log.push(key.clone());
        if key == "write-1" && first {
            // A's attempt: answered only once A is paused and B has taken over.
            Reply::status(503).after(Duration::from_secs(4))
        } else {
            Reply::status(201)
        }
    })
    .await;
    let system = "bulkhead = \"none\"\n\n[systems.pay.retry]\nmax_attempts = 2\nfirst_delay = \"100ms\"\nmax_delay = \"200ms\"\n\n\
                  [systems.pay.timeout]\nattempt = \"8s\"\n";
    let text = config(&queue_url, &upstream, system);
    let queue = Queue::connect(&queue_url).await.unwrap();
    queue.migrate().await.unwrap();
    store(&queue, "write-1", Some("pay:customer/42")).await;
    store(&queue, "write-2", Some("pay:customer/42")).await;

    let a = Served::start_text(&text, &[]);
    eventually("A sends write 1", || async { seen.lock().unwrap().len() == 1 }).await;
    signal(&a, "-STOP");
    let b = Served::start_text(&text, &[]);
    eventually("B delivers write 1, then write 2", || async {
        seen.lock().unwrap().iter().any(|k| k == "write-2")
    })
    .await;
    signal(&a, "-CONT");
    // A reads its 503 and retries within 100-200 ms; give it ample time.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let order = seen.lock().unwrap().clone();
    let second = order.iter().position(|k| k == "write-2").unwrap();
    assert!(
        !order[second..].iter().any(|k| k == "write-1"),
        "write 1 was sent after write 2 (out of order): {order:?}"
    );
    drop((a, b));
}

/// C6: a replica's leases run out while it cannot reach the database (its
/// table locked for 4 s, as an outage looks to it): the deliveries it holds,
/// each waiting for its bulkhead slot, stop before their next send instead
/// of sending on through the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_a_worker_cut_from_the_database_stops_sending_once_its_leases_run_out() {
    let Some(queue_url) = support::pg_queue("c6").await else { return };
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let log = Arc::clone(&arrivals);
    let upstream = Upstream::start(move |_, _| {
        log.lock().unwrap().push(Instant::now());
        Reply::status(201).after(Duration::from_millis(200))
    })
    .await;
    // Two at a time, 200 ms each: the deliveries the worker holds wait their
    // turn for a slot, ten a second.
    let system = "[systems.pay.bulkhead]\nlimit = 2\n";
    let text = config(&queue_url, &upstream, system);
    let queue = Queue::connect(&queue_url).await.unwrap();
    queue.migrate().await.unwrap();
    for i in 0..40 {
        store(&queue, &format!("c6-{i}"), None).await;
    }
    let served = Served::start_text(&text, &[]);
    eventually("deliveries go out at the rate", || async { arrivals.lock().unwrap().len() >= 3 }).await;

    let admin = sqlx::PgPool::connect(&queue_url).await.unwrap();
    let mut outage = admin.begin().await.unwrap();
    sqlx::query("LOCK TABLE ballast_tasks IN ACCESS EXCLUSIVE MODE").execute(&mut *outage).await.unwrap();
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let ended = Instant::now();
    outage.rollback().await.unwrap();
    // The lease (1 s) and the margin a send needs: past them, nothing leaves.
    let quiet_from = cut + Duration::from_millis(1_500);
    let during: Vec<Duration> = arrivals
        .lock()
        .unwrap()
        .iter()
        .filter(|at| **at > quiet_from && **at < ended)
        .map(|at| at.duration_since(cut))
        .collect();
    assert!(during.is_empty(), "sent while its leases were gone, at {during:?} into the outage");
    eventually("the deliveries go on after the outage", || async {
        arrivals.lock().unwrap().iter().any(|at| *at > ended)
    })
    .await;
    drop(served);
}
