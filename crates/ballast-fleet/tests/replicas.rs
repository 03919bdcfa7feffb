//! Replicas on a real PostgreSQL (when `BALLAST_TEST_PG` is set; skipped,
//! and said so, otherwise): joining, the live count, drift, a clock off the
//! database's, and a stopped replica seen gone at once.

mod support;

use ballast_fleet::{Fleet, FleetView, ReplicaState};
use support::me;

#[tokio::test]
async fn replicas_know_each_other_and_the_odd_one_is_flagged() {
    let Some(url) = support::database("fleet_r").await else { return };
    let a = Fleet::join(&url, me("aaaa")).await.unwrap();
    let b = Fleet::join(&url, me("aaaa")).await.unwrap();
    let c = Fleet::join(&url, me("cccc")).await.unwrap();
    assert_eq!(c.live(), 3, "the third sees three");
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    // As a replica whose clock runs 1.5 s ahead would have said at its heartbeat.
    sqlx::query("UPDATE ballast_fleet_replicas SET clock_skew_ms = 1500 WHERE id = $1")
        .bind(b.id())
        .execute(&pool)
        .await
        .unwrap();
    let view = FleetView::connect(&url).await.unwrap();
    let replicas = view.replicas().await.unwrap();
    let by_id = |id| replicas.iter().find(|r| r.id == id).unwrap();
    assert!(replicas.iter().all(|r| r.state == ReplicaState::Live), "{replicas:?}");
    assert!(by_id(c.id()).drift && !by_id(a.id()).drift, "the odd configuration is flagged");
    assert!(by_id(b.id()).clock_off && !by_id(a.id()).clock_off, "the clock off by over a second is flagged");

    let stop = tokio_util::sync::CancellationToken::new();
    struct Nothing;
    impl ballast_fleet::Members for Nothing {
        fn members(&self) -> Vec<ballast_fleet::Member> {
            Vec::new()
        }
    }
    let running = c.run(std::sync::Arc::new(Nothing), stop.clone());
    stop.cancel();
    running.await.unwrap();
    let replicas = view.replicas().await.unwrap();
    let c_now = replicas.iter().find(|r| r.id == c.id()).unwrap();
    assert_eq!(c_now.state, ReplicaState::Gone, "a stopped replica is gone at once");
    assert!(!c_now.drift, "a gone replica is not held against the fleet");
}

struct One(ballast::Policy);

impl ballast_fleet::Members for One {
    fn members(&self) -> Vec<ballast_fleet::Member> {
        vec![ballast_fleet::Member::new("crm", self.0.clone())]
    }
}

/// What one replica learns from a 429 (the fleet's rate lowered) and from
/// a `RateLimit-Policy` header (a new ceiling) reaches the other within a
/// second, with its next lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_replica_learns_reaches_the_other_within_a_second() {
    let Some(url) = support::database("fleet_r").await else { return };
    let stop = tokio_util::sync::CancellationToken::new();
    let mut policies = Vec::new();
    for n in 0..2 {
        let limit = ballast::RateLimit::per_second(100).adaptive().fleet();
        let policy = ballast::Policy::builder("crm").rate_limit(limit).build().unwrap();
        let fleet = Fleet::join(&url, me(&format!("same-{n}"))).await.unwrap();
        let _running = fleet.run(std::sync::Arc::new(One(policy.clone())), stop.clone());
        policies.push(policy);
    }
    let call = |policy: &ballast::Policy| {
        let policy = policy.clone();
        async move { policy.read(|_| async { Ok::<_, std::convert::Infallible>(()) }).await.is_ok() }
    };
    for policy in &policies {
        assert!(call(policy).await, "a permit from the fleet's bucket");
    }
    let b = policies[1].rate_limiter().unwrap();
    // Calls on `a` until `learned` holds of its rate, a second at most.
    let reaches_a = |what: &'static str, learned: fn(f64) -> bool| {
        let policy = policies[0].clone();
        async move {
            let a = policy.rate_limiter().expect("a rate limiter");
            let started = std::time::Instant::now();
            while !learned(a.rate()) {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(1),
                    "{what} on the other: {}",
                    a.rate()
                );
                call(&policy).await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    b.announce(40.0);
    call(&policies[1]).await;
    reaches_a("an announced rate", |rate| rate <= 40.0).await;
    // A second after the announcement, a throttle lowers the fleet's rate.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    b.throttled(None);
    call(&policies[1]).await;
    reaches_a("a throttle", |rate| rate < 40.0).await;
    stop.cancel();
}
