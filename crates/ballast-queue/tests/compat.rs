//! Two versions on one database, as a rolling upgrade runs them
//! (PostgreSQL, when `BALLAST_TEST_PG` is set; SQLite has one replica): a
//! worker of the previous schema enqueues, claims and settles tasks with
//! its own statements while this version's migrations are applied under
//! it, and keeps working; this version's worker then takes the same tasks.
//! Every migration is also read for what would break the previous
//! version: dropped or renamed columns and tables, a new column it cannot
//! fill.

mod support;

use std::time::Duration;

use ballast_queue::migrations::{HISTORY, SCHEMA};
use ballast_queue::{Handler, Queue, TaskContext, TaskState, Worker};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Row as _;
use support::{pg_options, wait_for, PG_ENV};
use tokio_util::sync::CancellationToken;

/// Each backend's migrations, as the stores apply them.
const PG: [&str; 7] = [
    include_str!("../migrations/postgres/0001_tasks.sql"),
    include_str!("../migrations/postgres/0002_live_index.sql"),
    include_str!("../migrations/postgres/0003_task_result.sql"),
    include_str!("../migrations/postgres/0004_probe.sql"),
    include_str!("../migrations/postgres/0005_sequence.sql"),
    include_str!("../migrations/postgres/0006_pending_claim.sql"),
    include_str!("../migrations/postgres/0007_bound_keys.sql"),
];
const SQLITE: [&str; 7] = [
    include_str!("../migrations/sqlite/0001_tasks.sql"),
    include_str!("../migrations/sqlite/0002_live_index.sql"),
    include_str!("../migrations/sqlite/0003_task_result.sql"),
    include_str!("../migrations/sqlite/0004_probe.sql"),
    include_str!("../migrations/sqlite/0005_sequence.sql"),
    include_str!("../migrations/sqlite/0006_pending_claim.sql"),
    include_str!("../migrations/sqlite/0007_bound_keys.sql"),
];

/// What the previous schema's worker runs, statement by statement: its
/// enqueue (with its conflict target), its claim (the live walk that finds
/// due tasks and expired leases, `SKIP LOCKED`), its settle (fenced by the
/// lease token).
const PREVIOUS_ENQUEUE: &str = "
    INSERT INTO ballast_tasks (kind, payload, idempotency_key, max_attempts, run_at, sequence)
    VALUES ($1, $2::jsonb, $3, 10, now(), NULL)
    ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id";
const PREVIOUS_CLAIM: &str = "
    WITH picked AS (
        SELECT id FROM ballast_tasks
        WHERE finalized_at IS NULL AND run_at <= now() AND kind = ANY($1)
          AND (state = 'pending' OR lease_expires_at <= now())
        ORDER BY run_at LIMIT 10
        FOR UPDATE SKIP LOCKED)
    UPDATE ballast_tasks t
    SET state = 'running', attempt = t.attempt + 1, lease_owner = 'previous',
        lease_token = gen_random_uuid(), lease_expires_at = now() + interval '30 seconds',
        updated_at = now()
    FROM picked WHERE t.id = picked.id
    RETURNING t.id, t.lease_token";
const PREVIOUS_SETTLE: &str = "
    UPDATE ballast_tasks SET state = 'completed', result = NULL, finalized_at = now(),
        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE id = $1 AND lease_token = $2 AND state = 'running'";

#[test]
fn every_migration_is_additive_for_the_version_before_it() {
    assert_eq!(HISTORY.len(), PG.len());
    assert_eq!(SQLITE.len(), PG.len());
    for (m, sql) in
        HISTORY.iter().zip(PG.iter().zip(SQLITE)).flat_map(|(m, (pg, lite))| [(m, *pg), (m, lite)])
    {
        if m.oldest_reader > 1 {
            continue;
        }
        let code: String = sql
            .lines()
            .map(|l| l.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
            .to_ascii_uppercase();
        for breaking in
            ["DROP COLUMN", "RENAME", "DROP TABLE", "ALTER COLUMN", "TRUNCATE", "DELETE FROM BALLAST_TASKS"]
        {
            assert!(
                !code.contains(breaking),
                "migration {} says it is additive but has {breaking}",
                m.version
            );
        }
        for add in code.split("ADD COLUMN").skip(1) {
            let column = add.split([',', ';']).next().unwrap_or_default();
            assert!(
                !column.contains("NOT NULL") || column.contains("DEFAULT"),
                "migration {} adds a NOT NULL column without a default: {column}",
                m.version
            );
        }
    }
}

#[derive(Clone)]
struct Succeed;

impl Handler for Succeed {
    type Payload = serde_json::Value;
    type Error = std::convert::Infallible;

    async fn handle(&self, _task: TaskContext, _payload: serde_json::Value) -> Result<(), Self::Error> {
        Ok(())
    }
}

/// The previous schema's worker: enqueues one keyed task, claims what is
/// due and settles it, round after round, until `stop`; the tasks it
/// completed.
async fn previous_worker(pool: PgPool, stop: CancellationToken) -> Vec<i64> {
    let mut done = Vec::new();
    let mut n = 0;
    while !stop.is_cancelled() {
        n += 1;
        let key = format!("previous-{n}");
        sqlx::query(PREVIOUS_ENQUEUE)
            .bind("compat")
            .bind(format!("{{\"n\":{n}}}"))
            .bind(&key)
            .fetch_optional(&pool)
            .await
            .unwrap_or_else(|e| panic!("the previous version's enqueue failed: {e}"));
        let claimed = sqlx::query(PREVIOUS_CLAIM)
            .bind(vec!["compat".to_owned()])
            .fetch_all(&pool)
            .await
            .unwrap_or_else(|e| panic!("the previous version's claim failed: {e}"));
        for row in claimed {
            let (id, token): (i64, uuid::Uuid) = (row.get("id"), row.get("lease_token"));
            let settled = sqlx::query(PREVIOUS_SETTLE)
                .bind(id)
                .bind(token)
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("the previous version's settle failed: {e}"));
            assert_eq!(settled.rows_affected(), 1, "its own lease settles its own task");
            done.push(id);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_version_keeps_working_while_this_one_migrates() {
    let Ok(url) = std::env::var(PG_ENV) else {
        eprintln!("skipped: {PG_ENV} not set");
        return;
    };
    let schema = format!("compat_{}", uuid::Uuid::now_v7().simple());
    let admin = PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{PG_ENV}={url} is set but PostgreSQL is unreachable: {e}"));
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.expect("create schema");
    let pool = PgPoolOptions::new().max_connections(4).connect_with(pg_options(&url, &schema)).await.unwrap();
    // The database as the previous version left it.
    let previous = SCHEMA - 1;
    sqlx::raw_sql("CREATE TABLE ballast_migrations (version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        .execute(&pool)
        .await
        .unwrap();
    for (version, sql) in (1..=previous).zip(PG) {
        sqlx::raw_sql(sql).execute(&pool).await.unwrap_or_else(|e| panic!("migration {version}: {e}"));
        sqlx::query("INSERT INTO ballast_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&pool)
            .await
            .unwrap();
    }
    let queue = Queue::from_postgres(pool.clone());
    assert_eq!(queue.applied_schema().await.unwrap(), previous);

    let stop = CancellationToken::new();
    let running = tokio::spawn(previous_worker(pool.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    queue.migrate().await.expect("this version's migrations");
    assert_eq!(queue.applied_schema().await.unwrap(), SCHEMA);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    let done = running.await.expect("the previous version's worker kept working");
    assert!(done.len() >= 10, "it went on completing tasks: {}", done.len());

    // Both versions on the same tasks: this one's worker takes what the
    // previous one enqueued, its keys deduplicated alike.
    let again = queue
        .enqueue(
            ballast_queue::NewTask::new("compat", &1)
                .key(ballast::IdempotencyKey::parse("previous-1").unwrap()),
        )
        .await
        .unwrap();
    assert!(!again.created, "a key the previous version stored is the same task");
    let fresh: i64 = sqlx::query_scalar(PREVIOUS_ENQUEUE)
        .bind("compat")
        .bind("{\"n\":0}")
        .bind("after-the-upgrade")
        .fetch_one(&pool)
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone())
        .handler("compat", Succeed)
        .poll_interval(Duration::from_millis(20))
        .build()
        .unwrap();
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    wait_for(&queue, fresh, Duration::from_secs(10), |t| t.state == TaskState::Completed).await;
    shutdown.cancel();
    run.await.unwrap();
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await.unwrap();
}
