//! The queue's database away from `ballast serve` on PostgreSQL (when
//! `BALLAST_TEST_PG` is set): a write that needs the queue is answered at
//! once, readiness says so at once — the fleet's rate limit held alone per
//! system too — and both come back with the database.

mod support;

use std::time::{Duration, Instant};

use ballast_test_support::{Relay, Reply, Upstream};
use serde_json::Value;
use support::{client, Served};

/// How soon a caller is answered, and readiness follows, with the database away.
const ANSWERED_WITHIN: Duration = Duration::from_secs(2);

/// The database's connections cut (reset, new ones closed): a keyed write
/// to a system that is down, which only the queue could take, is answered
/// `503 queue_unavailable` with `Retry-After` within 2 s — not held for the
/// pool's acquire timeout — and `/health/ready` turns 503 within 2 s. With
/// the database back, the same write is deferred (202) and readiness is 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_database_away_a_write_that_needs_the_queue_is_answered_within_2s() {
    let Some(url) = support::pg_queue("away").await else { return };
    let (relay, through) = support::through_relay(&url).await;
    let upstream = Upstream::start(|_, _| Reply::status(503)).await;
    let text = format!(
        "[queue]\nurl = \"{through}\"\n\n[gateway]\nlisten = \"127.0.0.1:0\"\n\n\
         [systems.pay]\nbase_url = \"http://{}/\"\ndedupes_by_key = true\nkey_ttl = \"1h\"\nbreaker = \"none\"\n\n\
         [systems.pay.retry]\nmax_attempts = 1\n\n[systems.pay.rate_limit]\nrate = \"100/s\"\nscope = \"fleet\"\n",
        upstream.addr
    );
    let served = Served::start_text(&text, &[]);
    let ready = || async {
        match client().get(format!("{}/health/ready", served.admin)).send().await {
            Ok(answer) => answer.status().as_u16(),
            Err(_) => 0,
        }
    };
    assert_eq!(ready().await, 200);
    let fleet_limit = || async {
        let body: Value = client()
            .get(format!("{}/health/ready", served.admin))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["systems"][0]["fleet_limit"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(
        served.defer("pay/payments", "away-0").await.status(),
        202,
        "deferred while the database is there"
    );

    for (mode, away) in [("cut", Relay::cut as fn(&Relay)), ("partitioned", Relay::partition)] {
        away(&relay);
        let cut = Instant::now();
        // Readiness watched from the moment the database went, beside the writes.
        let admin = served.admin.clone();
        let watched = tokio::spawn(async move {
            while cut.elapsed() < Duration::from_secs(20) {
                let status =
                    client().get(format!("{admin}/health/ready")).send().await.map(|a| a.status().as_u16());
                if status.is_ok_and(|s| s == 503) {
                    return Some(cut.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None
        });
        // The first finds its pooled connection dead; the next ones find none.
        for n in 1..=3 {
            let sent = Instant::now();
            let answer = served.defer("pay/payments", &format!("away-{mode}-{n}")).await;
            let took = sent.elapsed();
            let status = answer.status().as_u16();
            let retry_after = answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            let body: Value = answer.json().await.unwrap_or_default();
            eprintln!("database {mode}: write {n}, which needs the queue, answered {status} in {took:?}");
            assert_eq!(status, 503, "{body}");
            assert_eq!(body["ballast"]["reason"], "queue_unavailable", "{body}");
            assert!(retry_after.is_some(), "says when to come back: {body}");
            assert!(took <= ANSWERED_WITHIN, "database {mode}: answered after {took:?}");
        }
        let turned = watched.await.unwrap().expect("readiness never said the database is away");
        eprintln!("database {mode}: readiness turned 503 {turned:?} after it went");
        assert!(turned <= ANSWERED_WITHIN, "database {mode}: readiness turned after {turned:?}");
        ballast_test_support::eventually("readiness says pay's fleet limit is held alone", || async {
            fleet_limit().await == "degraded"
        })
        .await;

        relay.restore();
        let back = Instant::now();
        while ready().await != 200 {
            assert!(back.elapsed() < Duration::from_secs(20), "readiness stays 503 with the database back");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    ballast_test_support::eventually("the fleet's limit is shared again", || async {
        fleet_limit().await == "shared"
    })
    .await;
    let again = served.defer("pay/payments", "away-cut-1").await;
    let status = again.status();
    assert_eq!(
        status,
        202,
        "the same write, again, is deferred once the database is back: {}",
        again.text().await.unwrap()
    );
}
