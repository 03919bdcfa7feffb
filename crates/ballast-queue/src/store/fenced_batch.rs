//! C1, on both backends: a batch that holds a stale attempt's outcome and
//! the current attempt's outcome of one task settles each by its own lease.
//! The stale one is refused with its follow-ups (an alert task for a task
//! that did not fail for good); the current one lands with its own.
//!
//! And an outcome written in a round trip whose answer was lost is the
//! worker's own when it sends it again, not a lease it lost (C3).
//!
//! Driven through the store, whose batches the worker's completer makes:
//! a worker would have to lose a lease and win it back within one batch,
//! which no public call can arrange on purpose.

use std::time::Duration;

use uuid::Uuid;

use super::{ClaimRequest, Lease, Store};
use crate::outcome::Outcome;
use crate::task::NewTask;
use crate::types::TaskState;
use crate::Queue;

/// Claims the one due task of kind `job` as `owner`.
async fn claim(queue: &Queue, owner: &str) -> Lease {
    let claim = ClaimRequest {
        kinds: vec!["job".to_owned()].into(),
        families: Vec::new().into(),
        owner: owner.into(),
        limit: 1,
        lease: Duration::from_secs(30),
        sweep: false,
    };
    let claimed = queue.store.settle_and_claim(&[], &claim).await.unwrap().claimed;
    assert_eq!(claimed.len(), 1, "{owner} claims the task");
    claimed[0].lease
}

fn failed(lease: Lease, alert_key: &str) -> Outcome {
    let alert = NewTask::new("alert", &lease.id).key(ballast::IdempotencyKey::v5(alert_key, "alert"));
    Outcome::Failed { lease, error: "declined".into(), follow_ups: vec![alert.validate(3).unwrap()] }
}

/// A round trip that only sweeps expired leases back to pending.
async fn sweep(queue: &Queue) {
    let sweep = ClaimRequest {
        kinds: vec!["job".to_owned()].into(),
        families: Vec::new().into(),
        owner: "sweeper".into(),
        limit: 0,
        lease: Duration::from_secs(30),
        sweep: true,
    };
    queue.store.settle_and_claim(&[], &sweep).await.unwrap();
}

/// One task claimed twice (its first lease expired in between, and the
/// sweep returned it to pending), then both attempts' outcomes settled in
/// one batch, in both orders; `expire` makes every running lease look
/// expired.
async fn two_attempts_in_one_batch(queue: &Queue, expire: impl AsyncFn()) {
    for (n, stale_fails, current_fails) in [(1, true, false), (2, false, true), (3, true, true)] {
        let id = queue.enqueue(NewTask::new("job", &n)).await.unwrap().id;
        let stale = claim(queue, "a").await;
        expire().await;
        sweep(queue).await;
        let current = claim(queue, "b").await;
        assert_eq!((stale.id, current.id), (id, id));
        let outcome = |lease: Lease, fails: bool, key: &str| {
            if fails {
                failed(lease, key)
            } else {
                Outcome::Completed { lease, result: None, follow_ups: Vec::new() }
            }
        };
        let batch = [
            outcome(stale, stale_fails, &format!("stale-{n}")),
            outcome(current, current_fails, &format!("current-{n}")),
        ];
        let nothing = ClaimRequest {
            kinds: vec!["job".to_owned()].into(),
            families: Vec::new().into(),
            owner: "b".into(),
            limit: 0,
            lease: Duration::from_secs(30),
            sweep: false,
        };
        let exchange = queue.store.settle_and_claim(&batch, &nothing).await.unwrap();
        assert_eq!(exchange.refused, [stale], "case {n}: only the stale outcome is refused");
        // The same batch again, as a worker whose answer was lost sends it:
        // its own written outcome is known for its own, not a lost lease.
        let again = queue.store.settle_and_claim(&batch, &nothing).await.unwrap();
        assert_eq!(again.refused, [stale], "case {n}: a lost answer's outcome is recognised");
        let task = queue.get(id).await.unwrap().unwrap();
        let state = if current_fails { TaskState::Failed } else { TaskState::Completed };
        assert_eq!(task.state, state, "case {n}: the current attempt's outcome stands");
        let alerts = queue
            .list(&crate::ListFilter { kind: Some("alert".into()), ..Default::default() })
            .await
            .unwrap();
        let keys: Vec<String> = alerts.iter().filter_map(|t| t.key.clone()).collect();
        let expected: Vec<String> = current_fails
            .then(|| ballast::IdempotencyKey::v5(format!("current-{n}"), "alert").as_str().to_owned())
            .into_iter()
            .collect();
        let mine: Vec<String> = keys
            .into_iter()
            .filter(|k| {
                [format!("stale-{n}"), format!("current-{n}")]
                    .iter()
                    .any(|name| ballast::IdempotencyKey::v5(name, "alert").as_str() == k)
            })
            .collect();
        assert_eq!(mine, expected, "case {n}: an alert only for the current attempt's own failure");
    }
    let unknown = Lease { id: 1, token: Uuid::now_v7() };
    let exchange = queue
        .store
        .settle_and_claim(
            &[Outcome::Released { lease: unknown }],
            &ClaimRequest {
                kinds: vec!["job".to_owned()].into(),
                families: Vec::new().into(),
                owner: "c".into(),
                limit: 0,
                lease: Duration::from_secs(30),
                sweep: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(exchange.refused, [unknown], "a lease nobody holds is refused");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_settles_each_outcome_by_its_own_lease() {
    let dir = tempfile::tempdir().unwrap();
    let pool = sqlx::SqlitePool::connect_with(Queue::sqlite_options(dir.path().join("q.db"))).await.unwrap();
    let queue = Queue::from_sqlite(pool.clone());
    queue.migrate().await.unwrap();
    two_attempts_in_one_batch(&queue, async || {
        sqlx::query("UPDATE ballast_tasks SET lease_expires_at = 0 WHERE state = 'running'")
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_settles_each_outcome_by_its_own_lease() {
    let Some(schema) = crate::test_schema::TestSchema::create().await else { return };
    let options = schema.options.clone();
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(4).connect_with(options).await.unwrap();
    let queue = Queue::from_postgres(pool.clone());
    queue.migrate().await.unwrap();
    two_attempts_in_one_batch(&queue, async || {
        sqlx::query(
            "UPDATE ballast_tasks SET lease_expires_at = now() - interval '1 hour' WHERE state = 'running'",
        )
        .execute(&pool)
        .await
        .unwrap();
    })
    .await;
    schema.drop_it().await;
}
