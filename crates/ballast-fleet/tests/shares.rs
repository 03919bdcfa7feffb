//! Replicas sharing a saturated fleet-wide rate limit on a real PostgreSQL
//! (when `BALLAST_TEST_PG` is set; skipped, and said so, otherwise): each
//! gets the part of the rate its demand asks for, whichever leases first.

use std::sync::Arc;
use std::time::Duration;

use ballast::{Policy, RateLimit};
use ballast_fleet::{Fleet, Member, Members};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod support;

struct One(Policy);

impl Members for One {
    fn members(&self) -> Vec<Member> {
        vec![Member::new("crm", self.0.clone())]
    }
}

/// A replica of the fleet at `url` whose `crm` is limited to 100 calls a
/// second across the fleet.
async fn replica(url: &str, stop: &CancellationToken) -> Policy {
    let fleet = Fleet::join(url, support::me("same")).await.unwrap();
    let policy =
        Policy::builder("crm").rate_limit(RateLimit::per_second(100).burst(10).fleet()).build().unwrap();
    fleet.run(Arc::new(One(policy.clone())), stop.clone());
    policy
}

/// Offers `per_second` calls a second to `policy`, each on its own, until
/// `until`; those let through after `from`. A `paced` call waits up to a
/// second for its permit, as a worker's delivery does; any other is
/// refused when none is on hand, as a live call is.
async fn offer(policy: Policy, per_second: u32, paced: bool, from: Instant, until: Instant) -> usize {
    let mut calls = tokio::task::JoinSet::new();
    let mut every = tokio::time::interval(Duration::from_secs(1) / per_second);
    while Instant::now() < until {
        every.tick().await;
        let policy = policy.clone();
        calls.spawn(async move {
            let call = policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) });
            let ok = if paced {
                ballast::background_within(Duration::from_secs(1), call).await.is_ok()
            } else {
                call.await.is_ok()
            };
            let done = Instant::now();
            ok && done >= from && done < until
        });
    }
    calls.join_all().await.into_iter().filter(|ok| *ok).count()
}

/// Two replicas offered `a` and `b` calls a second against the fleet's
/// 100, together sending the fleet's rate (and its burst): the first's
/// part of what they sent in the last four of six seconds, and the counts.
async fn split(a: u32, b: u32, paced: bool) -> Option<(f64, String)> {
    let url = support::database("fleet_s").await?;
    let stop = CancellationToken::new();
    let (first, second) = (replica(&url, &stop).await, replica(&url, &stop).await);
    let start = Instant::now();
    let (from, until) = (start + Duration::from_secs(2), start + Duration::from_secs(6));
    let (sent_a, sent_b) =
        tokio::join!(offer(first, a, paced, from, until), offer(second, b, false, from, until));
    stop.cancel();
    let kind = if paced { "paced" } else { "live" };
    eprintln!("offered {a}/s {kind} and {b}/s live against 100/s: sent {sent_a} and {sent_b} in 4 s");
    let total = (sent_a + sent_b) as f64;
    assert!(
        (0.85 * 400.0..=430.0).contains(&total),
        "together they send the fleet's rate: {sent_a} + {sent_b}"
    );
    Some((sent_a as f64 / total, format!("{sent_a} against {sent_b}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_with_even_demand_share_a_saturated_limit_evenly() {
    let Some((part, sent)) = split(150, 150, false).await else { return };
    assert!((0.4..=0.6).contains(&part), "even demand, an even split: {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_asking_three_times_as_much_gets_about_three_times_the_permits() {
    let Some((part, sent)) = split(300, 100, false).await else { return };
    assert!((0.62..=0.85).contains(&part), "demand 3:1, permits about 3:1: {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_work_that_waits_for_its_permits_gets_its_share_beside_live_calls() {
    let Some((part, sent)) = split(150, 150, true).await else { return };
    assert!((0.4..=0.6).contains(&part), "even demand, an even split, the first paced: {sent}");
}
