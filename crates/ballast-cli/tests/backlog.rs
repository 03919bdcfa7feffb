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
