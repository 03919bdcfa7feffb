//! A fleet of real `ballast serve` processes on one PostgreSQL queue (the
//! tests run when `BALLAST_TEST_PG` is set, and say they were skipped
//! otherwise): the fleet keeps a system's rate limit, a replica killed
//! mid-run leaves its share and its deliveries to the others, a replica cut
//! off from the upstream opens only its own breaker, and without the
//! database each replica holds its share of the limit.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ballast_test_support::{eventually, Reply, Seen, Upstream};
use serde_json::Value;
use support::{client, Served};

const PG_ENV: &str = "BALLAST_TEST_PG";

/// One fleet at a time: each test measures rates its replicas keep, which
/// another fleet's processes on the same cores would disturb.
static ONE_FLEET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The PostgreSQL URL of a fresh schema and this test's turn to run a
/// fleet, or `None` (said) without the variable.
async fn schema() -> Option<(String, tokio::sync::MutexGuard<'static, ()>)> {
    let Ok(url) = std::env::var(PG_ENV) else {
        eprintln!("skipped: {PG_ENV} not set");
        return None;
    };
    let schema = format!("fleet_{}", uuid_like());
    let admin = sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{PG_ENV}={url} is set but PostgreSQL is unreachable: {e}"));
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    Some((format!("{url}{separator}options=-c%20search_path%3D{schema}"), ONE_FLEET.lock().await))
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{:x}{:x}", nanos, std::process::id())
}

/// An upstream that allows `rate` requests a second (a burst of `burst`) and
/// answers 429 beyond, as a partner with a published limit does; it applies
/// a keyed write once per key, and counts in `applied` how often it did.
fn limited(
    rate: f64,
    burst: f64,
    applied: Arc<Mutex<HashMap<String, u32>>>,
) -> impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static {
    let bucket = Mutex::new((burst, Instant::now()));
    move |seen, _| {
        let mut state = bucket.lock().unwrap();
        let now = Instant::now();
        let tokens = (state.0 + rate * now.duration_since(state.1).as_secs_f64()).min(burst);
        if tokens < 1.0 {
            *state = (tokens, now);
            return Reply::status(429).header("retry-after", "1");
        }
        *state = (tokens - 1.0, now);
        if let Some(key) = seen.key() {
            let mut applied = applied.lock().unwrap();
            let times = applied.entry(key.to_owned()).or_insert(0);
            // Deduplicated by key: a repeat is answered, not applied again.
            if *times == 0 {
                *times = 1;
            }
        }
        Reply::status(200)
    }
}

fn config(queue_url: &str, upstream: &Upstream, system: &str) -> String {
    format!(
        "[queue]\nurl = \"{queue_url}\"\npoll_interval = \"200ms\"\nlease = \"2s\"\n\n[serve]\nstats_interval = \"1s\"\n\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\n\n[systems.crm]\nbase_url = \"http://{}/\"\n{system}",
        upstream.addr
    )
}

/// Offers `per_second` GETs a second to each of `gateways` until `until`;
/// the statuses the callers got.
async fn offer(gateways: Vec<String>, per_second: u32, until: Instant) -> Vec<Answered> {
    let answered = Arc::new(Mutex::new(Vec::new()));
    let mut runs = tokio::task::JoinSet::new();
    for (gateway_n, gateway) in gateways.into_iter().enumerate() {
        let answered = Arc::clone(&answered);
        runs.spawn(async move {
            let client = client();
            let mut every = tokio::time::interval(Duration::from_secs(1) / per_second);
            while Instant::now() < until {
                every.tick().await;
                let (client, url, answered) =
                    (client.clone(), format!("{gateway}/call/crm/leads"), Arc::clone(&answered));
                tokio::spawn(async move {
                    let at = Instant::now();
                    let status = client.get(url).send().await.map_or(0, |r| r.status().as_u16());
                    answered.lock().unwrap().push(Answered { gateway: gateway_n, at, status });
                });
            }
        });
    }
    while runs.join_next().await.is_some() {}
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = answered.lock().unwrap().clone();
    out
}

/// One caller's call as [`offer`] made it.
#[derive(Debug, Clone, Copy)]
struct Answered {
    /// Which of the gateways it went to.
    gateway: usize,
    /// When it was sent.
    at: Instant,
    /// The status answered (0: none).
    status: u16,
}

fn statuses(answered: &[Answered]) -> Vec<u16> {
    answered.iter().map(|a| a.status).collect()
}

/// Counts the upstream's 200s and 429s answered to requests that arrived
/// between `from` and `to`.
fn shares(upstream: &Upstream, statuses: &HashMap<usize, u16>, from: Instant, to: Instant) -> (f64, f64) {
    let seen = upstream.requests();
    let (mut ok, mut throttled) = (0, 0);
    for (i, s) in seen.iter().enumerate() {
        if s.at < from || s.at >= to {
            continue;
        }
        match statuses.get(&(i + 1)) {
            Some(429) => throttled += 1,
            Some(_) => ok += 1,
            None => {}
        }
    }
    let total = f64::from(ok + throttled).max(1.0);
    (f64::from(throttled) / total, f64::from(ok))
}

/// Keyed writes the callers let the gateway defer, 5 a second to each of
/// `gateways` until `until`; their keys.
async fn defer_writes(gateways: Vec<String>, until: Instant) -> Vec<String> {
    let mut keys = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(200));
    let mut n = 0;
    while Instant::now() < until {
        every.tick().await;
        for gateway in &gateways {
            n += 1;
            let key = format!("pay-{n}");
            let sent = client()
                .post(format!("{gateway}/call/crm/payments"))
                .header("idempotency-key", &key)
                .header("prefer", "respond-async")
                .send()
                .await;
            // A replica killed meanwhile answers nothing: its caller tries another.
            if sent.is_ok_and(|r| [200, 202].contains(&r.status().as_u16())) {
                keys.push(key);
            }
        }
    }
    keys
}

/// The upstream's answer to each request by its number, recorded by the script.
type Answers = Arc<Mutex<HashMap<usize, u16>>>;

fn recording(
    script: impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static,
) -> (Answers, impl Fn(&Seen, usize) -> Reply + Send + Sync + 'static) {
    let answers: Answers = Arc::default();
    let kept = Arc::clone(&answers);
    (answers, move |seen: &Seen, n: usize| {
        let reply = script(seen, n);
        if let Reply::With { status, .. } = &reply {
            kept.lock().unwrap().insert(n, *status);
        }
        reply
    })
}

/// Three replicas, an upstream that allows 100 requests a second, 300 a
/// second offered across them for 30 s: with `scope = "fleet"` the fleet
/// keeps the limit (≤ 5 % 429s after the first 3 s, ≥ 90 % of the allowed
/// rate used); the same replicas each holding the limit alone send it three
/// times over. One of them killed midway leaves its share to the others
/// within 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_keep_the_system_s_rate_limit_together() {
    let Some((url, _turn)) = schema().await else { return };
    let applied: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let (answers, script) = recording(limited(100.0, 20.0, Arc::clone(&applied)));
    let upstream = Upstream::start(script).await;
    // The fleet sends at most its burst and a tenth of a second's worth at
    // once (15 here): under the upstream's burst of 20, with room for the
    // jitter of three processes' hops on two cores.
    let system = "dedupes_by_key = true\nkey_ttl = \"1h\"\nbreaker = \"none\"\n\
                  [systems.crm.retry]\nmax_attempts = 1\nretry_on = [\"5xx\", \"timeout\", \"connect\", \"reset\", \"429\"]\n\
                  [systems.crm.rate_limit]\nrate = \"100/s\"\nburst = 5\nscope = \"fleet\"\n";
    let text = config(&url, &upstream, system);
    let mut replicas: Vec<Served> = (0..3).map(|_| Served::start_text(&text, &[])).collect();
    let gateways: Vec<String> = replicas.iter().map(|r| r.gateway.clone()).collect();
    let start = Instant::now();
    let until = start + Duration::from_secs(30);
    let load = tokio::spawn(offer(gateways.clone(), 100, until));
    let writes = tokio::spawn(defer_writes(gateways, start + Duration::from_secs(20)));
    tokio::time::sleep(Duration::from_secs(15)).await;
    let killed_at = Instant::now();
    let _ = replicas[2].child.kill();
    let answered = load.await.unwrap();
    let statuses = statuses(&answered);
    let keys = writes.await.unwrap();
    let answers = answers.lock().unwrap().clone();
    let (throttled, ok) = shares(&upstream, &answers, start + Duration::from_secs(3), killed_at);
    let used = ok / (100.0 * (killed_at - start - Duration::from_secs(3)).as_secs_f64());
    let (after_throttled, after_ok) = shares(&upstream, &answers, killed_at + Duration::from_secs(3), until);
    let after_used = after_ok / (100.0 * (until - killed_at - Duration::from_secs(3)).as_secs_f64());
    eprintln!(
        "fleet of 3, 300/s offered to 100/s allowed: {:.1} % 429s, {:.0} % of the allowed rate used; \
         after one replica was killed: {:.1} % 429s, {:.0} % used; callers got {} answers",
        throttled * 100.0,
        used * 100.0,
        after_throttled * 100.0,
        after_used * 100.0,
        statuses.len()
    );
    assert!(throttled <= 0.05, "the fleet keeps the limit: {:.1} % 429s", throttled * 100.0);
    assert!(used >= 0.9, "and uses it: {:.0} %", used * 100.0);
    assert!(after_throttled <= 0.05 && after_used >= 0.9, "two replicas take the third's share within 3 s");
    // Callers split evenly over the replicas: so are the permits.
    let mut sent = [0_u32; 3];
    for a in answered.iter().filter(|a| a.status == 200) {
        if a.at >= start + Duration::from_secs(3) && a.at < killed_at {
            sent[a.gateway] += 1;
        }
    }
    let (least, most) = (sent.iter().min().copied().unwrap(), sent.iter().max().copied().unwrap());
    eprintln!("permits sent per replica while all three ran: {sent:?}");
    assert!(f64::from(most) <= 1.5 * f64::from(least.max(1)), "an even demand, an even split: {sent:?}");
    let refused = statuses.iter().filter(|s| **s == 503).count();
    // 0: a call to the killed replica, which answers nothing; 429: the
    // upstream's own answer, passed on (the share above).
    let other: Vec<&u16> = statuses.iter().filter(|s| ![0, 200, 429, 503].contains(*s)).collect();
    assert!(refused > 0 && other.is_empty(), "refusals are the gateway's own 503s: {other:?}");

    // Every write was applied once, those deferred included, whichever
    // replica delivered them — the killed one's taken over after its lease.
    let deadline = Instant::now() + Duration::from_secs(20);
    let missing = loop {
        let missing: Vec<String> = {
            let applied = applied.lock().unwrap();
            keys.iter().filter(|k| applied.get(*k) != Some(&1)).cloned().collect()
        };
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let tasks = support::ballast(&["queue", "--db", &url, "list", "--format", "json", "--limit", "10000"]);
    let tasks: Value = serde_json::from_slice(&tasks.stdout).unwrap();
    let theirs: Vec<&Value> =
        tasks.as_array().unwrap().iter().filter(|t| missing.iter().any(|k| t["key"] == k.as_str())).collect();
    assert!(
        missing.is_empty(),
        "every deferred write is delivered; not {missing:?}, their tasks: {theirs:?}"
    );
    let failed: Vec<&Value> = tasks.as_array().unwrap().iter().filter(|t| t["state"] == "failed").collect();
    assert!(failed.is_empty(), "nothing lost: {failed:?}");
    eprintln!(
        "{} keyed writes, {} of them deferred, every one applied once",
        keys.len(),
        tasks.as_array().unwrap().len()
    );

    let listed =
        support::ballast(&["fleet", "--config", replicas[0].config().to_str().unwrap(), "--format", "json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let states: Vec<&str> = listed.as_array().unwrap().iter().map(|r| r["state"].as_str().unwrap()).collect();
    let (live, gone) =
        (states.iter().filter(|s| **s == "live").count(), states.iter().filter(|s| **s == "gone").count());
    assert_eq!((live, gone), (2, 1), "the killed replica is gone: {listed}");
    assert!(listed.as_array().unwrap().iter().all(|r| r["drift"] == false), "one configuration: {listed}");
}

/// The same limit on one replica (a fleet of one), 300 a second offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_keeps_the_limit_alone() {
    let Some((url, _turn)) = schema().await else { return };
    let (answers, script) = recording(limited(100.0, 20.0, Arc::default()));
    let upstream = Upstream::start(script).await;
    let system = "retry = \"none\"\nbreaker = \"none\"\n[systems.crm.rate_limit]\nrate = \"100/s\"\nburst = 10\nscope = \"fleet\"\n";
    let replica = Served::start_text(&config(&url, &upstream, system), &[]);
    let start = Instant::now();
    let until = start + Duration::from_secs(10);
    offer(vec![replica.gateway.clone()], 300, until).await;
    let (throttled, ok) = shares(&upstream, &answers.lock().unwrap(), start + Duration::from_secs(3), until);
    let used = ok / (100.0 * 7.0);
    eprintln!(
        "fleet of 1, 300/s offered to 100/s allowed: {:.1} % 429s, {:.0} % of the allowed rate used",
        throttled * 100.0,
        used * 100.0
    );
    assert!(throttled <= 0.05 && used >= 0.9, "{:.1} % 429s, {:.0} % used", throttled * 100.0, used * 100.0);
}

/// The same load without `scope = "fleet"`: each replica holds the limit on
/// its own and the three send it three times over, as `lint`'s note warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_each_hold_the_limit_send_it_n_times_over() {
    let Some((url, _turn)) = schema().await else { return };
    let (answers, script) = recording(limited(100.0, 20.0, Arc::default()));
    let upstream = Upstream::start(script).await;
    let system =
        "retry = \"none\"\nbreaker = \"none\"\n[systems.crm.rate_limit]\nrate = \"100/s\"\nburst = 10\n";
    let text = config(&url, &upstream, system);
    let replicas: Vec<Served> = (0..3).map(|_| Served::start_text(&text, &[])).collect();
    let gateways: Vec<String> = replicas.iter().map(|r| r.gateway.clone()).collect();
    let start = Instant::now();
    let until = start + Duration::from_secs(10);
    offer(gateways, 100, until).await;
    let (throttled, _) = shares(&upstream, &answers.lock().unwrap(), start + Duration::from_secs(3), until);
    eprintln!("3 replicas each holding 100/s: {:.1} % 429s", throttled * 100.0);
    assert!(throttled > 0.3, "{:.1} % 429s", throttled * 100.0);
}

/// One replica whose own path to the upstream is broken (its requests
/// reset) opens only its own breaker; when every replica sees the system
/// failing, a quorum opens it for the fleet, one replica probes, and the
/// fleet closes when the probe gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_opens_only_its_own_breaker_and_a_quorum_opens_the_fleet_s() {
    let Some((url, _turn)) = schema().await else { return };
    let all_down = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let down = Arc::clone(&all_down);
    let upstream = Upstream::start(move |seen, _| {
        if down.load(std::sync::atomic::Ordering::Relaxed) {
            Reply::status(503)
        } else if seen.header("x-replica") == Some("3") {
            Reply::Reset
        } else {
            Reply::status(200)
        }
    })
    .await;
    let system = "retry = \"none\"\n[systems.crm.breaker]\nkind = \"consecutive\"\nthreshold = 3\nhalf_open_after = \"2s\"\n\
                  scope = \"fleet\"\nquorum = 2\n[systems.crm.headers]\nX-Replica = { env = \"FLEET_TEST_REPLICA\" }\n";
    let text = config(&url, &upstream, system);
    let replicas: Vec<Served> =
        (1..=3).map(|n| Served::start_text(&text, &[("FLEET_TEST_REPLICA", n.to_string())])).collect();
    let get = |replica: &Served| {
        let url = format!("{}/call/crm/leads", replica.gateway);
        async move { client().get(url).send().await.unwrap().status().as_u16() }
    };
    for _ in 0..5 {
        get(&replicas[2]).await;
    }
    assert_eq!(get(&replicas[2]).await, 503, "the cut-off replica's own breaker is open");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for replica in &replicas[..2] {
        assert_eq!(get(replica).await, 200, "the others keep calling: one replica is no quorum");
    }

    all_down.store(true, std::sync::atomic::Ordering::Relaxed);
    for replica in &replicas[..2] {
        for _ in 0..4 {
            get(replica).await;
        }
    }
    let before = upstream.count();
    eventually("the fleet's breaker holds every replica open", || async {
        let mut all = true;
        for replica in &replicas {
            all &= get(replica).await == 503;
        }
        all && upstream.count() == before
    })
    .await;
    all_down.store(false, std::sync::atomic::Ordering::Relaxed);
    eventually("one probe closes the fleet's breaker", || async {
        get(&replicas[0]).await == 200 && get(&replicas[1]).await == 200
    })
    .await;
}

/// Without the database (its connections cut) each replica holds the
/// fleet's rate over the replicas last seen, answers every call itself —
/// no 5xx of its own — and returns to the fleet's limit when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_database_each_replica_holds_its_share() {
    let Some((url, _turn)) = schema().await else { return };
    let (relay, through) = support::through_relay(&url).await;
    let upstream = Upstream::start(|_, _| Reply::status(200)).await;
    let system = "retry = \"none\"\nbreaker = \"none\"\n[systems.crm.rate_limit]\nrate = \"60/s\"\nburst = 5\nscope = \"fleet\"\n";
    let text = config(&through, &upstream, system);
    let replicas: Vec<Served> = (0..2).map(|_| Served::start_text(&text, &[])).collect();
    let gateways: Vec<String> = replicas.iter().map(|r| r.gateway.clone()).collect();
    offer(gateways.clone(), 50, Instant::now() + Duration::from_secs(3)).await;
    relay.cut();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = upstream.count();
    let started = Instant::now();
    let statuses = statuses(&offer(gateways.clone(), 50, started + Duration::from_secs(10)).await);
    let sent = upstream.count() - before;
    let rate = sent as f64 / 10.0;
    eprintln!(
        "without the database, 2 replicas offered 100/s against a fleet limit of 60/s sent {rate:.1}/s"
    );
    assert!((60.0 * 0.8..=60.0 * 1.1).contains(&rate), "each holds 30/s of 60: {rate:.1}/s");
    assert!(statuses.iter().all(|s| [200, 503].contains(s)), "the gateway answers every call: {statuses:?}");
    for replica in &replicas {
        assert!(replica.log().contains("cannot be reached"), "{}", replica.log());
    }
    relay.restore();
    eventually("back to the fleet's bucket", || async {
        for gateway in &gateways {
            let _ = client().get(format!("{gateway}/call/crm/leads")).send().await;
        }
        replicas.iter().all(|r| r.log().contains("rate limit is reachable again"))
    })
    .await;
}

/// `ballast lint` reads a fleet breaker's `quorum` against the replicas that
/// ran at once on the queue's database in the last day: two replicas side
/// by side, and a third that ran before them, make a quorum of 3 a warning
/// naming 2, and a quorum of 2 clean; `--offline` reads only the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lint_warns_of_a_quorum_the_replicas_that_ran_never_reach() {
    let Some((url, _turn)) = schema().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = |quorum: u32| {
        let path = dir.path().join(format!("quorum-{quorum}.toml"));
        let text = format!(
            "[queue]\nurl = \"{url}\"\n\n[systems.crm]\nbase_url = \"https://crm.example/\"\nretry = \"none\"\n\n\
             [systems.crm.breaker]\nkind = \"consecutive\"\nthreshold = 5\nscope = \"fleet\"\nquorum = {quorum}\n"
        );
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (three, two) = (file(3), file(2));

    // No fleet ever ran here: nothing to compare with, and nothing created.
    let said = support::ballast(&["lint", &three]);
    let text = String::from_utf8_lossy(&said.stdout).into_owned();
    assert!(text.contains("note: no replica ran on this database in the last day"), "{text}");

    let fleet = support::ballast(&["fleet", "--config", &three]);
    assert!(fleet.status.success(), "{}", String::from_utf8_lossy(&fleet.stderr));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    for (started, gone) in [("3 hours", "2 hours"), ("1 hour", "0 hours"), ("30 minutes", "0 hours")] {
        sqlx::query(
            "INSERT INTO ballast_fleet_replicas (id, host, pid, version, config_digest, started_at, heartbeat_at)
             VALUES (gen_random_uuid(), 'h', 1, 'v', 'd', now() - $1::interval, now() - $2::interval)",
        )
        .bind(started)
        .bind(gone)
        .execute(&pool)
        .await
        .unwrap();
    }

    let said = support::ballast(&["lint", &three]);
    let text = String::from_utf8_lossy(&said.stdout).into_owned();
    assert_eq!(said.status.code(), Some(0), "a warning, not an error: {text}");
    assert!(text.contains("0 errors, 1 warning"), "counted in the file's summary: {text}");
    assert!(
        text.contains("opens once 3 replicas see it failing, but at most 2 ran at once in the last day"),
        "{text}"
    );
    assert!(text.contains("set quorum to at most 2"), "{text}");
    let json = support::ballast(&["lint", "--format", "json", &three]);
    let found: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(found.as_array().unwrap().iter().any(|f| f["severity"] == "warning"), "{found}");

    let clean = support::ballast(&["lint", &two]);
    let text = String::from_utf8_lossy(&clean.stdout).into_owned();
    assert!(!text.contains("ran at once"), "a quorum of 2 is reached: {text}");
    let offline = support::ballast(&["lint", "--offline", &three]);
    let text = String::from_utf8_lossy(&offline.stdout).into_owned();
    assert!(!text.contains("ran at once"), "--offline reads only the file: {text}");
}
