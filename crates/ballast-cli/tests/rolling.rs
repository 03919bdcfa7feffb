//! A fleet restarted replica by replica under load, as a deploy rolls
//! (PostgreSQL, when `BALLAST_TEST_PG` is set): three `ballast serve`
//! processes, a client that sends only to replicas whose readiness is 200
//! and resends a refused connection to another replica (a load balancer or
//! a mesh does the same), 100 calls a second of reads, keyed writes and
//! writes sent once for 30 s, each replica in turn stopped with SIGTERM,
//! waited for and started again. Nothing is lost: every read and keyed
//! write is answered 2xx or 202, every keyed write applied exactly once,
//! every write sent once answered or reported with its outcome unknown,
//! no task failed or left, no periodic period sent twice.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_test_support::{Reply, Upstream};
use support::{client, Served};

const REPLICAS: usize = 3;
const LOAD: Duration = Duration::from_secs(30);
const PER_SECOND: u32 = 100;

/// What the upstream received: each key's sends and applications, each
/// write sent once's arrivals.
#[derive(Default)]
struct Ledger {
    sends: HashMap<String, u32>,
    applied: HashMap<String, u32>,
    notes: HashMap<String, u32>,
}

fn config(queue_url: &str, upstream: &Upstream) -> String {
    format!(
        r#"[queue]
url = "{queue_url}"
poll_interval = "200ms"
lease = "2s"

[queue.periodic.tick]
system = "pay"
method = "POST"
path = "ticks"
every = "2s"
max_attempts = 1

[serve]
stats_interval = "1s"
drain_delay = "1s"
drain_timeout = "5s"

[gateway]
listen = "127.0.0.1:0"

[systems.pay]
base_url = "http://{up}/"
dedupes_by_key = true
key_ttl = "1h"
bulkhead = "none"
unrouted = "once"

[systems.pay.retry]
max_attempts = 2
first_delay = "100ms"
max_delay = "200ms"

[systems.pay.timeout]
attempt = "1s"

[systems.pay.routes]
"GET /balance" = "read"
"POST /payments" = "keyed_write"
"POST /notes" = "write_once"
"POST /ticks" = "keyed_write"
"#,
        up = upstream.addr
    )
}

/// Where each replica is now, and whether its readiness said 200 last.
#[derive(Clone, Default)]
struct Replicas(Arc<Mutex<Vec<(String, String, bool)>>>);

impl Replicas {
    fn ready(&self, skip: Option<&str>) -> Vec<String> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(gw, _, ready)| *ready && Some(gw.as_str()) != skip)
            .map(|(gw, ..)| gw.clone())
            .collect()
    }
}

/// What one call came to.
#[derive(Debug, Clone, PartialEq)]
enum Came {
    Status(u16),
    /// A write sent once whose outcome the caller cannot know.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Read,
    Keyed,
    Once,
}

/// One call as a load balancer in front of the fleet makes it: to a ready
/// replica; a connection refused (nothing sent) goes to another; a write
/// sent once whose connection broke after sending is of unknown outcome.
async fn call(replicas: &Replicas, kind: Kind, n: usize, next: &AtomicUsize) -> Came {
    let mut last = None;
    for _ in 0..20 {
        let ready = replicas.ready(last.as_deref());
        if ready.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let gateway = ready[next.fetch_add(1, Ordering::Relaxed) % ready.len()].clone();
        let request = match kind {
            Kind::Read => client().get(format!("{gateway}/call/pay/balance")),
            Kind::Keyed => client()
                .post(format!("{gateway}/call/pay/payments"))
                .header("idempotency-key", format!("pay-{n}"))
                .header("prefer", "respond-async")
                .body(r#"{"amount":100}"#),
            Kind::Once => {
                client().post(format!("{gateway}/call/pay/notes")).body(format!(r#"{{"note":{n}}}"#))
            }
        };
        match request.send().await {
            Ok(answer) => {
                let status = answer.status().as_u16();
                let reason =
                    answer.headers().get("ballast-problem").and_then(|v| v.to_str().ok()).map(str::to_owned);
                if kind == Kind::Once && status == 503 && reason.as_deref() == Some("draining") {
                    return Came::Unknown;
                }
                return Came::Status(status);
            }
            // Reads and keyed writes are safe to send again; a write sent
            // once only when nothing was sent.
            Err(e) if kind != Kind::Once || e.is_connect() => last = Some(gateway),
            Err(_) => return Came::Unknown,
        }
    }
    Came::Status(0)
}

/// Polls each replica's readiness every 50 ms until `stop`.
async fn readiness(replicas: Replicas, stop: tokio_util::sync::CancellationToken) {
    let client = reqwest::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
    while !stop.is_cancelled() {
        let admins: Vec<String> =
            replicas.0.lock().unwrap().iter().map(|(_, admin, _)| admin.clone()).collect();
        for (i, admin) in admins.iter().enumerate() {
            let ready =
                client.get(format!("{admin}/health/ready")).send().await.is_ok_and(|a| a.status() == 200);
            if let Some(entry) = replicas.0.lock().unwrap().get_mut(i) {
                if &entry.1 == admin {
                    entry.2 = ready;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_restarted_replica_by_replica_under_load_loses_nothing() {
    let Some(queue_url) = support::pg_queue("rolling").await else { return };

    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let book = Arc::clone(&ledger);
    // 20 to 400 ms an answer: calls are in flight whenever a replica is told to stop.
    let upstream = Upstream::start(move |seen, n| {
        let mut book = book.lock().unwrap();
        if let Some(key) = seen.key() {
            *book.sends.entry(key.to_owned()).or_default() += 1;
            // Deduplicated by key: applied the first time only.
            book.applied.entry(key.to_owned()).or_insert(1);
        } else if seen.target.contains("notes") {
            *book.notes.entry(seen.text()).or_default() += 1;
        }
        Reply::status(201).after(Duration::from_millis(20 + (n as u64 % 20) * 20))
    })
    .await;
    let text = config(&queue_url, &upstream);
    let mut served: Vec<Served> = (0..REPLICAS).map(|_| Served::start_text(&text, &[])).collect();
    let replicas = Replicas(Arc::new(Mutex::new(
        served.iter().map(|s| (s.gateway.clone(), s.admin.clone(), false)).collect(),
    )));
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(readiness(replicas.clone(), stop.clone()));
    ballast_test_support::eventually("every replica is ready", || async {
        replicas.ready(None).len() == REPLICAS
    })
    .await;

    // The load: 100 calls a second, a third of each kind.
    let outcomes: Arc<Mutex<Vec<(Kind, usize, Came)>>> = Arc::default();
    let load = {
        let (replicas, outcomes) = (replicas.clone(), Arc::clone(&outcomes));
        tokio::spawn(async move {
            let next = Arc::new(AtomicUsize::new(0));
            let mut calls = tokio::task::JoinSet::new();
            let mut every = tokio::time::interval(Duration::from_secs(1) / PER_SECOND);
            let start = Instant::now();
            let mut n = 0;
            while start.elapsed() < LOAD {
                every.tick().await;
                n += 1;
                let kind = [Kind::Read, Kind::Keyed, Kind::Once][n % 3];
                let (replicas, outcomes, next) = (replicas.clone(), Arc::clone(&outcomes), Arc::clone(&next));
                calls.spawn(async move {
                    let came = call(&replicas, kind, n, &next).await;
                    outcomes.lock().unwrap().push((kind, n, came));
                });
            }
            while calls.join_next().await.is_some() {}
        })
    };

    // Each replica in turn: SIGTERM, wait for it to exit, start it again, wait until it is ready.
    let mut drains = Vec::new();
    tokio::time::sleep(Duration::from_secs(4)).await;
    for (i, replica) in served.iter_mut().enumerate() {
        let signalled = Instant::now();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &replica.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        loop {
            if let Some(status) = replica.child.try_wait().unwrap() {
                assert!(status.success(), "replica {i}: {status:?}\n{}", replica.log());
                break;
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(20),
                "replica {i} still draining:\n{}",
                replica.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drains.push(signalled.elapsed());
        replica.restart(&[]);
        replicas.0.lock().unwrap()[i] = (replica.gateway.clone(), replica.admin.clone(), false);
        let gateway = replica.gateway.clone();
        ballast_test_support::eventually("the restarted replica is ready", || async {
            replicas.ready(None).contains(&gateway)
        })
        .await;
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    load.await.unwrap();
    stop.cancel();

    // The deferred writes finish; no task failed or is left.
    let pool = sqlx::PgPool::connect(&queue_url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM ballast_tasks WHERE state NOT IN ('completed') AND idempotency_key NOT LIKE 'periodic:%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{open} tasks not completed 60 s after the load");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM ballast_tasks WHERE state = 'failed'")
        .fetch_one(&pool)
        .await
        .unwrap();

    let outcomes = outcomes.lock().unwrap().clone();
    check(&outcomes, &ledger.lock().unwrap(), &drains, failed);
}

/// What the callers and the upstream saw, against what must hold.
fn check(outcomes: &[(Kind, usize, Came)], book: &Ledger, drains: &[Duration], failed: i64) {
    let mut by_status: HashMap<String, usize> = HashMap::new();
    for (kind, _, came) in outcomes {
        *by_status.entry(format!("{kind:?} {came:?}")).or_default() += 1;
    }
    let mut by_status: Vec<_> = by_status.into_iter().collect();
    by_status.sort();
    eprintln!(
        "rolling restart: {} calls; {by_status:?}; replicas drained in {:?}; {failed} tasks failed",
        outcomes.len(),
        drains
    );
    let answered = |came: &Came| matches!(came, Came::Status(200..=299));
    for (kind, n, came) in outcomes {
        match kind {
            Kind::Read | Kind::Keyed => assert!(answered(came), "{kind:?} call {n}: {came:?}"),
            Kind::Once => assert!(answered(came) || *came == Came::Unknown, "write sent once {n}: {came:?}"),
        }
    }
    let keyed: Vec<usize> = outcomes.iter().filter(|(k, ..)| *k == Kind::Keyed).map(|(_, n, _)| *n).collect();
    for n in &keyed {
        assert_eq!(book.applied.get(&format!("pay-{n}")), Some(&1), "keyed write {n} applied exactly once");
    }
    for (kind, n, came) in outcomes {
        if *kind == Kind::Once {
            let arrived = book.notes.get(&format!(r#"{{"note":{n}}}"#)).copied().unwrap_or(0);
            assert!(arrived <= 1, "write sent once {n} arrived {arrived} times");
            if answered(came) {
                assert_eq!(arrived, 1, "write sent once {n} answered {came:?} but not applied");
            }
        }
    }
    let periods: Vec<_> = book.sends.iter().filter(|(key, _)| key.starts_with("periodic:")).collect();
    assert!(!periods.is_empty(), "the periodic task ran");
    for (key, sends) in periods {
        assert_eq!(*sends, 1, "period {key} sent {sends} times");
    }
    assert_eq!(failed, 0);
}
