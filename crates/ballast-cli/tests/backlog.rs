//! A deferred backlog meeting a system's limits, through the real `ballast
//! serve`: a write the system did not take (429) is sent again when it
//! says, never failed for it.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ballast_test_support::{Reply, Upstream};
use serde_json::Value;
use support::Served;

/// A deferred payment answered `429 Retry-After: 1` three times — more
/// than the queue's `max_attempts` of 2 — then taken: delivered, not
/// failed, each resend a second after the one before, no alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_answered_429_is_sent_again_when_the_system_says_never_failed_for_it() {
    let sends = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&sends);
    let upstream = Upstream::start(move |request, _| match request.target.as_str() {
        "/alerts" => Reply::status(200),
        _ => match seen.fetch_add(1, Ordering::SeqCst) {
            // The live attempt: the system is down, the write is deferred.
            0 => Reply::status(503),
            1..=3 => Reply::status(429).header("retry-after", "1"),
            _ => Reply::body(201, r#"{"payment_id":"p-1"}"#),
        },
    })
    .await;
    let alerts = upstream.url("/alerts");
    let served = Served::start_with(
        &upstream,
        "max_attempts = 2\n\n[[alerts.webhook]]\nurl_env = \"ALERT_URL\"\nformat = \"json\"\n",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nbreaker = \"none\"\n\n\
         [systems.pay.retry]\nmax_attempts = 1\n",
        &[("ALERT_URL", alerts)],
    );
    let deferred = served.defer("pay/payments", "pay-429").await;
    assert_eq!(deferred.status(), 202);
    let handle = deferred.json::<Value>().await.unwrap()["task_id"].as_str().unwrap().to_owned();
    let task = served.waited(&format!("/tasks/{handle}")).await;
    assert_eq!(task["state"], "completed", "{task}");
    assert_eq!(sends.load(Ordering::SeqCst), 5, "the live attempt, three 429s, the one taken");
    let times: Vec<_> =
        upstream.requests().iter().filter(|r| r.target == "/payments").map(|r| r.at).collect();
    for pair in times.windows(2).skip(1) {
        assert!(
            pair[1].duration_since(pair[0]) >= Duration::from_millis(900),
            "resent before Retry-After: {times:?}"
        );
    }
    assert!(upstream.requests().iter().all(|r| r.target != "/alerts"), "nobody was alerted");
}

/// A note is for `ballast lint`: `ballast serve` starts saying only what is
/// wrong or advised against, not every note of the file on every start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_says_no_notes_lint_does() {
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let system = "[systems.pay]\nbase_url = \"http://{up}/\"\norder = [\"retry\", \"breaker\", \"bulkhead\", \"timeout\"]\n";
    let served = Served::start(&upstream, "", system);
    let note = "repeats the fixed composition order";
    let said = std::fs::read_to_string(served.dir.path().join("stderr.log")).unwrap();
    assert!(!said.contains(note), "serve printed a note: {said}");
    let lint = support::ballast(&["lint", &served.dir.path().join("ballast.toml").display().to_string()]);
    assert!(String::from_utf8_lossy(&lint.stdout).contains(note), "lint says the note");
}

/// A database that takes connections and never answers (a host behind a
/// black-holing firewall looks the same): `ballast fleet` and `ballast
/// serve` give up after the 5 s connect timeout and say why, instead of
/// hanging for sqlx's 30 s.
#[test]
fn an_unreachable_database_is_given_up_on_after_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((connection, _)) = silent.accept() {
            held.push(connection);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ballast.toml");
    std::fs::write(
        &file,
        format!(
            "[queue]\nurl = \"postgres://ballast@127.0.0.1:{port}/q\"\n\n[serve]\nlisten = \"127.0.0.1:0\"\n\n\
             [systems.pay]\nbase_url = \"http://127.0.0.1:9/\"\n"
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    for (args, says) in [
        (vec!["fleet", "--config", &file], "did not answer within 5s"),
        (vec!["serve", "--config", &file], "did not answer within 5s"),
    ] {
        let started = std::time::Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ballast"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("`ballast {}` still waits after 20 s", args[0]);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut said = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut said).unwrap();
        assert!(!status.success(), "{said}");
        assert!(said.contains(says), "`ballast {}` says why: {said}", args[0]);
        assert!(started.elapsed() < Duration::from_secs(15), "gave up after {:?}", started.elapsed());
    }
}

/// Deliveries refused while the breaker's probe is out look again just
/// after it — not a whole `half_open_after` (10 s) later: a backlog left
/// by an outage is delivered within a couple of seconds of the probe that
/// closes the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_refused_by_the_probe_is_delivered_just_after_it() {
    let sends = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&sends);
    let upstream = Upstream::start(move |_, _| match seen.fetch_add(1, Ordering::SeqCst) {
        // The outage: one failure opens the breaker.
        0 => Reply::status(503),
        _ => Reply::body(201, "{}"),
    })
    .await;
    let served = Served::start(
        &upstream,
        "",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n\n\
         [systems.pay.retry]\nmax_attempts = 1\n\n[systems.pay.breaker]\nkind = \"consecutive\"\nthreshold = 1\n\
         half_open_after = \"10s\"\n",
    );
    let opened = std::time::Instant::now();
    let mut locations = Vec::new();
    for n in 0..12 {
        let deferred = served.defer("pay/payments", &format!("backlog-{n}")).await;
        assert_eq!(deferred.status(), 202);
        locations.push(deferred.headers()["location"].to_str().unwrap().to_owned());
    }
    for location in &locations {
        let task = served.waited(location).await;
        assert_eq!(task["state"], "completed", "{task}");
    }
    let took = opened.elapsed();
    assert!(
        took < Duration::from_secs(16),
        "the backlog took {took:?}: refused by the probe, it waited another half_open_after"
    );
}

/// A payment provider as the fleet tests meet it: down while `down` is set
/// (503), 429 with `Retry-After: 1` past `limit` writes in any second, and
/// a write applied once per key.
struct Provider {
    upstream: Upstream,
    down: Arc<std::sync::atomic::AtomicBool>,
    /// Each key applied, with when.
    applied: Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
    throttled: Arc<AtomicU32>,
}

impl Provider {
    async fn start(limit: usize) -> Provider {
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let applied: Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>> =
            Arc::default();
        let throttled = Arc::new(AtomicU32::new(0));
        let window = std::sync::Mutex::new(std::collections::VecDeque::<std::time::Instant>::new());
        let (is_down, ledger, over) = (Arc::clone(&down), Arc::clone(&applied), Arc::clone(&throttled));
        let upstream = Upstream::start(move |request, _| {
            if is_down.load(Ordering::SeqCst) {
                return Reply::status(503);
            }
            let now = std::time::Instant::now();
            let mut window = window.lock().unwrap();
            while window.front().is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(1)) {
                window.pop_front();
            }
            if window.len() >= limit {
                over.fetch_add(1, Ordering::SeqCst);
                return Reply::status(429).header("retry-after", "1");
            }
            window.push_back(now);
            let key = request.key().unwrap_or_default().to_owned();
            ledger.lock().unwrap().entry(key).or_insert(now);
            Reply::body(201, r#"{"payment_id":"p"}"#)
        })
        .await;
        Provider { upstream, down, applied, throttled }
    }

    fn applied(&self) -> usize {
        self.applied.lock().unwrap().len()
    }

    /// When the last key was applied.
    fn last_applied(&self) -> Option<std::time::Instant> {
        self.applied.lock().unwrap().values().max().copied()
    }
}

/// The last lines each replica logged, for a failure's message.
fn tails(replicas: &[Served]) -> String {
    let routine = ["deferred write delivered", "write deferred to the durable queue"];
    let tail = |log: String| {
        let said: Vec<_> = log.lines().filter(|l| !routine.iter().any(|r| l.contains(r))).collect();
        said[said.len().saturating_sub(40)..].join("\n")
    };
    replicas.iter().enumerate().map(|(n, r)| format!("replica {n}:\n{}\n", tail(r.log()))).collect()
}

/// A task not completed: id, state, attempt, owner, last error.
type OpenTask = (i64, String, i32, Option<String>, Option<String>);

/// Tasks by state in the queue at `url`, and those not completed.
async fn states(url: &str) -> (std::collections::BTreeMap<String, i64>, Vec<String>) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as("SELECT state, count(*) FROM ballast_tasks GROUP BY state")
        .fetch_all(&pool)
        .await
        .unwrap();
    let open: Vec<OpenTask> = sqlx::query_as(
        "SELECT id, state, attempt, lease_owner, last_error FROM ballast_tasks WHERE state <> 'completed' LIMIT 10",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    (rows.into_iter().collect(), open.into_iter().map(|row| format!("{row:?}")).collect())
}

/// A backlog on a fleet: three replicas on one PostgreSQL, `pay` at 20/s
/// for the fleet (`burst = 1`), its breaker opened by a 5 s outage with
/// `half_open_after = "30s"`, a `lease` of 10 s; the provider answers 429
/// past 20 writes a second. 300 writes deferred during the outage are all
/// applied once, none failed, at about the fleet's rate: on an idle machine
/// within 300 / 20 + 5 = 20 s of the outage's end (with `kill`, one replica
/// SIGKILLed 3 s into the drain: 25 s; BENCHMARKS.md has the runs). The
/// bound held here leaves room for a loaded machine: 30 s, 35 s with `kill`
/// — a backlog refused and postponed to the next poll, as before, took a
/// minute and failed some writes for their 429s. Returns how long it took.
async fn drain_on_three_replicas(name: &str, kill: bool) -> Option<Duration> {
    let queue_url = support::pg_queue(name).await?;
    let provider = Provider::start(20).await;
    let text = format!(
        "[queue]\nurl = \"{queue_url}\"\nlease = \"10s\"\nmax_attempts = 3\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
         [systems.pay]\nbase_url = \"http://{}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n\n\
         [systems.pay.retry]\nmax_attempts = 1\n\n\
         [systems.pay.breaker]\nkind = \"consecutive\"\nthreshold = 5\nhalf_open_after = \"30s\"\n\n\
         [systems.pay.rate_limit]\nrate = \"20/s\"\nburst = 1\nscope = \"fleet\"\n",
        provider.upstream.addr
    );
    let mut replicas: Vec<Served> = (0..3).map(|_| Served::start_text(&text, &[])).collect();
    provider.down.store(true, Ordering::SeqCst);
    let outage = std::time::Instant::now();
    let mut deferred = Vec::new();
    for wave in 0..10 {
        let sends = (0..30).map(|n| {
            let served = &replicas[n % 3];
            async move { served.defer("pay/payments", &format!("{name}-{wave}-{n}")).await.status() }
        });
        deferred.extend(futures_util::future::join_all(sends).await);
    }
    assert!(deferred.iter().all(|s| *s == 202), "every write deferred: {deferred:?}");
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(outage.elapsed())).await;
    provider.down.store(false, Ordering::SeqCst);
    let recovered = std::time::Instant::now();
    let bound = if kill { Duration::from_secs(35) } else { Duration::from_secs(30) };
    let mut killed = false;
    while provider.applied() < 300 && recovered.elapsed() < bound + Duration::from_secs(30) {
        if kill && !killed && recovered.elapsed() >= Duration::from_secs(3) {
            replicas[0].child.kill().unwrap();
            killed = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = provider.last_applied().map(|at| at.saturating_duration_since(recovered));
    assert_eq!(
        provider.applied(),
        300,
        "every write applied once: {:?}\n{}",
        states(&queue_url).await,
        tails(&replicas)
    );
    let took = took.unwrap();
    eprintln!(
        "{name}: 300 deferred writes applied {took:?} after the outage ended; {} answered 429",
        provider.throttled.load(Ordering::SeqCst)
    );
    assert!(took <= bound, "the drain took {took:?}, beyond {bound:?}\n{}", tails(&replicas));
    let mut settled = states(&queue_url).await;
    for _ in 0..50 {
        if settled.0.get("completed") == Some(&300) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        settled = states(&queue_url).await;
    }
    assert_eq!(settled.0.get("completed"), Some(&300), "none failed: {settled:?}\n{}", tails(&replicas));
    drop(replicas.drain(..));
    Some(took)
}

/// The two drains one after the other: each is three replicas on two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_drains_at_the_fleets_rate_though_a_replica_is_killed_mid_drain() {
    if drain_on_three_replicas("drain3", false).await.is_some() {
        drain_on_three_replicas("drain3kill", true).await;
    }
}

/// The trial's shape, on one `ballast serve` (SQLite): 200 keyed payments
/// at 8 a second, the caller letting each be deferred (`Prefer:
/// respond-async`), the provider down for 5 s from the fifth second, the
/// breaker's `half_open_after` 30 s. Each payment deferred is followed from
/// its 202 to its completion (`GET /tasks/{handle}?wait=`): the median
/// within 15 s, the last within 30 s — the backlog woken by a delivery's
/// probe 2 s after the breaker opened, not its 30 s, and sent at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_payments_complete_within_seconds_of_an_outage() {
    let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let is_down = Arc::clone(&down);
    let upstream = Upstream::start(move |_, _| {
        if is_down.load(Ordering::SeqCst) {
            Reply::status(503)
        } else {
            Reply::body(201, r#"{"payment_id":"p"}"#)
        }
    })
    .await;
    let served = Served::start(
        &upstream,
        "",
        "[systems.pay]\nbase_url = \"http://{up}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\n\n\
         [systems.pay.breaker]\nkind = \"consecutive\"\nthreshold = 5\nhalf_open_after = \"30s\"\n",
    );
    let served = Arc::new(served);
    let started = std::time::Instant::now();
    let mut followed = Vec::new();
    for n in 0..200u32 {
        let at = started + Duration::from_millis(125 * u64::from(n));
        tokio::time::sleep(at.saturating_duration_since(std::time::Instant::now())).await;
        let since = started.elapsed();
        down.store(since >= Duration::from_secs(5) && since < Duration::from_secs(10), Ordering::SeqCst);
        let served = Arc::clone(&served);
        followed.push(tokio::spawn(async move {
            let answer = served.defer("pay/payments", &format!("trial-{n}")).await;
            if answer.status() != 202 {
                assert!(answer.status().is_success(), "payment {n}: {}", answer.status());
                return None;
            }
            let deferred = std::time::Instant::now();
            let location = answer.headers()["location"].to_str().unwrap().to_owned();
            loop {
                let task = served.waited(&location).await;
                match task["state"].as_str() {
                    Some("completed") => return Some(deferred.elapsed()),
                    // Still running, or too many waiting at once: asked again.
                    Some("pending" | "running") | None if deferred.elapsed() < Duration::from_secs(90) => {
                        if task["state"].is_null() {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                    _ => panic!("payment {n} did not complete: {task}"),
                }
            }
        }));
    }
    down.store(false, Ordering::SeqCst);
    let mut took: Vec<Duration> = Vec::new();
    for follow in followed {
        took.extend(follow.await.unwrap());
    }
    took.sort();
    assert!(took.len() >= 20, "the outage deferred {} payments", took.len());
    let (min, p50, max) = (took[0], took[took.len() / 2], took[took.len() - 1]);
    eprintln!("{} payments deferred; 202 → completion min {min:?}, p50 {p50:?}, max {max:?}", took.len());
    assert!(p50 <= Duration::from_secs(15) && max <= Duration::from_secs(30), "{min:?} / {p50:?} / {max:?}");
}
