//! Periodic tasks across a fleet, on both backends and a simulated clock:
//! three workers' enqueuing of one periodic task over 100 periods leaves
//! exactly 100 tasks; a restart after ten missed periods enqueues what its
//! catch-up says; a worker killed right after it enqueued a period leaves
//! that period to no one else twice; a periodic task's status shows its
//! next run and its latest period's task.
//!
//! Driven through each worker's [`Runner`] with the time given, as the
//! worker's loop drives it with its clock: a real database, and a hundred
//! periods without waiting for them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::periodic::{CatchUp, Runner, Schedule};
use crate::types::ListFilter;
use crate::Queue;

const MINUTE: Duration = Duration::from_secs(60);

/// 2026-12-05 00:00:00 UTC, one second in.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_764_892_800 + 1)
}

fn periodic(queue: &Queue, catch_up: CatchUp) -> crate::Periodic {
    queue
        .periodic("reconcile", Schedule::every(MINUTE).unwrap())
        .payload(&serde_json::json!({"state": "pending"}))
        .catch_up(catch_up)
}

async fn keys(queue: &Queue) -> Vec<String> {
    let filter = ListFilter { kind: Some("reconcile".into()), limit: 1000, ..Default::default() };
    let mut keys: Vec<String> =
        queue.list(&filter).await.unwrap().into_iter().filter_map(|t| t.key).collect();
    keys.sort();
    keys
}

/// Ends every unfinished task, as workers running them would: a period's
/// task is enqueued only once the one before it ended.
async fn finish_all(queue: &Queue) {
    let filter = ListFilter { kind: Some("reconcile".into()), limit: 1000, ..Default::default() };
    for task in queue.list(&filter).await.unwrap() {
        if !task.state.is_final() {
            queue.cancel(task.id).await.unwrap();
        }
    }
}

fn key_of(start: SystemTime) -> String {
    format!("periodic:reconcile:{}", start.duration_since(UNIX_EPOCH).unwrap().as_secs())
}

/// Three workers, each on a pool of its own, 100 periods: one task each.
async fn three_workers_enqueue_each_of_100_periods_once(queues: [Queue; 3]) {
    let mut runners: Vec<Runner> = queues.iter().map(|q| Runner::new(periodic(q, CatchUp::Latest))).collect();
    for period in 0..100u32 {
        // Each worker wakes at its own moment in the period, in a changing order.
        for (n, offset) in [(period % 3, 0), ((period + 1) % 3, 7), ((period + 2) % 3, 13)] {
            let now = t0() + MINUTE * period + Duration::from_secs(offset);
            let next = runners[n as usize].due(&queues[n as usize], now).await.unwrap();
            assert_eq!(next, Some(t0() - Duration::from_secs(1) + MINUTE * (period + 1)));
        }
        finish_all(&queues[0]).await;
    }
    let keys = keys(&queues[0]).await;
    let expected: Vec<String> =
        (0..100u32).map(|p| key_of(t0() - Duration::from_secs(1) + MINUTE * p)).collect();
    assert_eq!(keys.len(), 100, "one task per period across three workers");
    assert_eq!(keys, {
        let mut e = expected;
        e.sort();
        e
    });
}

/// A worker that stops after period 5 and a new one at period 15: what the
/// ten missed periods become depends on the catch-up; caught up, they come
/// one at a time, each once the one before it ended.
async fn a_ten_period_stop_catches_up_as_asked(queue: Queue, catch_up: CatchUp, new_at_restart: usize) {
    let mut before = Runner::new(periodic(&queue, catch_up));
    for period in 0..=5u32 {
        before.due(&queue, t0() + MINUTE * period).await.unwrap();
        finish_all(&queue).await;
    }
    let had = keys(&queue).await.len();
    let mut after = Runner::new(periodic(&queue, catch_up));
    let restart = t0() + MINUTE * 15 + Duration::from_secs(20);
    after.due(&queue, restart).await.unwrap();
    assert!(keys(&queue).await.len() - had <= 1, "{catch_up:?}: one period at a time");
    for second in 1..=20 {
        finish_all(&queue).await;
        after.due(&queue, restart + Duration::from_secs(second)).await.unwrap();
    }
    let now = keys(&queue).await.len();
    assert_eq!(now - had, new_at_restart, "{catch_up:?}: tasks enqueued after the restart");
    // And the next period runs as usual.
    finish_all(&queue).await;
    after.due(&queue, t0() + MINUTE * 16).await.unwrap();
    assert_eq!(keys(&queue).await.len(), now + 1, "{catch_up:?}: the next period");
}

/// A period whose task has not ended holds the next one back: periods
/// never overlap (C7), and the next follows once it ended.
async fn a_period_waits_for_the_one_before_it(queue: Queue) {
    let mut runner = Runner::new(periodic(&queue, CatchUp::Latest));
    let start = t0() - Duration::from_secs(1);
    runner.due(&queue, t0()).await.unwrap();
    let next = runner.due(&queue, start + MINUTE).await.unwrap();
    assert_eq!(keys(&queue).await, [key_of(start)], "period 1 waits while period 0's task runs");
    assert_eq!(next, Some(start + MINUTE + Duration::from_secs(1)), "looked at again in a second");
    finish_all(&queue).await;
    runner.due(&queue, start + MINUTE + Duration::from_secs(1)).await.unwrap();
    assert_eq!(keys(&queue).await, [key_of(start), key_of(start + MINUTE)]);
}

/// The worker that enqueued a period is killed right after: the others
/// enqueue the same period and find it there.
async fn a_killed_worker_s_period_is_not_enqueued_twice(queues: [Queue; 2]) {
    let mut killed = Runner::new(periodic(&queues[0], CatchUp::Latest));
    killed.due(&queues[0], t0()).await.unwrap();
    drop(killed);
    let mut survivor = Runner::new(periodic(&queues[1], CatchUp::Latest));
    survivor.due(&queues[1], t0() + Duration::from_secs(5)).await.unwrap();
    finish_all(&queues[1]).await;
    survivor.due(&queues[1], t0() + MINUTE).await.unwrap();
    assert_eq!(
        keys(&queues[1]).await,
        [key_of(t0() - Duration::from_secs(1)), key_of(t0() - Duration::from_secs(1) + MINUTE)]
    );
}

/// What the dashboard shows: the next run — a period's task waiting to run,
/// or the next period — and the latest period's task that ran, of the
/// current period or the one before.
async fn the_status_shows_the_next_run_and_the_latest_period_s_task(queue: Queue) {
    let periodic = periodic(&queue, CatchUp::Latest);
    let start = t0() - Duration::from_secs(1);
    let status = periodic.status(&queue, t0()).await.unwrap();
    assert_eq!((status.name.as_str(), status.schedule.as_str()), ("reconcile", "every 1m"));
    assert!(status.last.is_none(), "no period ran yet");
    assert_eq!(status.next_run, Some(start + MINUTE));

    let mut runner = Runner::new(periodic.clone());
    runner.due(&queue, start + MINUTE).await.unwrap();
    let later = start + MINUTE + Duration::from_secs(30);
    let status = periodic.status(&queue, later).await.unwrap();
    assert!(status.last.is_none(), "enqueued, not run");
    assert_eq!(status.next_run, Some(start + MINUTE), "waiting since its period began");

    let task = queue.get_by_key("reconcile", &key_of(start + MINUTE)).await.unwrap().unwrap();
    assert!(queue.cancel(task.id).await.unwrap());
    let status = periodic.status(&queue, later).await.unwrap();
    assert_eq!(status.last.map(|t| (t.id, t.state)), Some((task.id, crate::TaskState::Cancelled)));
    assert_eq!(status.next_run, Some(start + MINUTE * 2));
    // The next period has no task (no worker ran it): the one before shows.
    let status = periodic.status(&queue, start + MINUTE * 2 + Duration::from_secs(5)).await.unwrap();
    assert_eq!(status.last.map(|t| t.id), Some(task.id));
    // Two periods without a task: nothing recent ran.
    let status = periodic.status(&queue, start + MINUTE * 3 + Duration::from_secs(5)).await.unwrap();
    assert!(status.last.is_none());
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    async fn queues<const N: usize>() -> (tempfile::TempDir, [Queue; N]) {
        let dir = tempfile::tempdir().unwrap();
        let mut queues = Vec::new();
        for _ in 0..N {
            let options =
                Queue::sqlite_options(dir.path().join("q.db")).busy_timeout(Duration::from_secs(10));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(2)
                .connect_with(options)
                .await
                .unwrap();
            let queue = Queue::from_sqlite(pool);
            queue.migrate().await.unwrap();
            queues.push(queue);
        }
        (dir, queues.try_into().unwrap_or_else(|_| unreachable!()))
    }

    #[tokio::test]
    async fn three_workers_one_task_per_period() {
        let (_dir, queues) = queues::<3>().await;
        three_workers_enqueue_each_of_100_periods_once(queues).await;
    }

    #[tokio::test]
    async fn a_stop_of_ten_periods() {
        for (catch_up, new) in [(CatchUp::Latest, 1), (CatchUp::All, 10), (CatchUp::None, 0)] {
            let (_dir, [queue]) = queues::<1>().await;
            a_ten_period_stop_catches_up_as_asked(queue, catch_up, new).await;
        }
    }

    #[tokio::test]
    async fn a_killed_worker() {
        let (_dir, queues) = queues::<2>().await;
        a_killed_worker_s_period_is_not_enqueued_twice(queues).await;
    }

    #[tokio::test]
    async fn periods_never_overlap() {
        let (_dir, [queue]) = queues::<1>().await;
        a_period_waits_for_the_one_before_it(queue).await;
    }

    #[tokio::test]
    async fn the_status() {
        let (_dir, [queue]) = queues::<1>().await;
        the_status_shows_the_next_run_and_the_latest_period_s_task(queue).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::test_schema::TestSchema;

    /// `N` queues on a fresh schema; `None` without `BALLAST_TEST_PG`.
    async fn queues<const N: usize>() -> Option<(TestSchema, [Queue; N])> {
        let schema = TestSchema::create().await?;
        let mut queues = Vec::new();
        for _ in 0..N {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect_with(schema.options.clone())
                .await
                .unwrap();
            let queue = Queue::from_postgres(pool);
            queue.migrate().await.unwrap();
            queues.push(queue);
        }
        Some((schema, queues.try_into().unwrap_or_else(|_| unreachable!())))
    }

    #[tokio::test]
    async fn three_workers_one_task_per_period() {
        let Some((schema, queues)) = queues::<3>().await else { return };
        three_workers_enqueue_each_of_100_periods_once(queues).await;
        schema.drop_it().await;
    }

    #[tokio::test]
    async fn a_stop_of_ten_periods() {
        for (catch_up, new) in [(CatchUp::Latest, 1), (CatchUp::All, 10), (CatchUp::None, 0)] {
            let Some((schema, [queue])) = queues::<1>().await else { return };
            a_ten_period_stop_catches_up_as_asked(queue, catch_up, new).await;
            schema.drop_it().await;
        }
    }

    #[tokio::test]
    async fn a_killed_worker() {
        let Some((schema, queues)) = queues::<2>().await else { return };
        a_killed_worker_s_period_is_not_enqueued_twice(queues).await;
        schema.drop_it().await;
    }

    #[tokio::test]
    async fn periods_never_overlap() {
        let Some((schema, [queue])) = queues::<1>().await else { return };
        a_period_waits_for_the_one_before_it(queue).await;
        schema.drop_it().await;
    }

    #[tokio::test]
    async fn the_status() {
        let Some((schema, [queue])) = queues::<1>().await else { return };
        the_status_shows_the_next_run_and_the_latest_period_s_task(queue).await;
        schema.drop_it().await;
    }
}
