//! A database migrated by an earlier version upgrades in place: tasks in
//! every state keep every column, and the queue works on them afterwards
//! (claims, lease rescue, deduplication, retries). SQLite always, PostgreSQL
//! when `BALLAST_TEST_PG` is set.

mod support;

use std::convert::Infallible;
use std::time::Duration;

use ballast::IdempotencyKey;
use ballast_queue::{Handler, ListFilter, NewTask, Queue, TaskContext, TaskState, Worker};
use futures_util::future::{BoxFuture, FutureExt};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use support::{pg_options, wait_for, PG_ENV};
use tokio_util::sync::CancellationToken;

const SOON: Duration = Duration::from_secs(10);

/// Version 1 exactly as the first release applied it: its SQL, then its row
/// in `ballast_migrations`.
const SQLITE_V1: &str = include_str!("../migrations/sqlite/0001_tasks.sql");
const PG_V1: &str = include_str!("../migrations/postgres/0001_tasks.sql");

/// Ids 1–8: due, due with a key, scheduled for later, running with an expired
/// lease, running with a live lease, completed, failed (with a key), cancelled.
const SQLITE_TASKS: &str = "
INSERT INTO ballast_tasks (kind, payload, idempotency_key, state, attempt, run_at, lease_owner,
                           lease_token, lease_expires_at, last_error, errors, created_at, updated_at,
                           finalized_at)
VALUES
 ('up', '{\"n\":1}', NULL, 'pending', 0, 1000, NULL, NULL, NULL, NULL, '[]', 1000, 1000, NULL),
 ('up', '{\"n\":2}', 'order-7', 'pending', 0, 1000, NULL, NULL, NULL, NULL, '[]', 1000, 1000, NULL),
 ('up', '{\"n\":3}', NULL, 'pending', 0, 9000000000000000, NULL, NULL, NULL, NULL, '[]', 1000, 1000, NULL),
 ('up', '{\"n\":4}', NULL, 'running', 1, 1000, 'gone', randomblob(16), 2000, NULL, '[]', 1000, 2000, NULL),
 ('up', '{\"n\":5}', NULL, 'running', 1, 1000, 'alive', randomblob(16), 9000000000000000, NULL, '[]',
  1000, 2000, NULL),
 ('up', '{\"n\":6}', NULL, 'completed', 1, 1000, NULL, NULL, NULL, NULL, '[]', 1000, 3000, 3000),
 ('up', '{\"n\":7}', 'order-8', 'failed', 1, 1000, NULL, NULL, NULL, 'card declined',
  '[{\"attempt\":1,\"at\":3000,\"error\":\"card declined\"}]', 1000, 3000, 3000),
 ('up', '{\"n\":8}', NULL, 'cancelled', 0, 1000, NULL, NULL, NULL, NULL, '[]', 1000, 3000, 3000)";

const PG_TASKS: &str = "
INSERT INTO ballast_tasks (kind, payload, idempotency_key, state, attempt, run_at, lease_owner,
                           lease_token, lease_expires_at, last_error, errors, created_at, updated_at,
                           finalized_at)
VALUES
 ('up', '{\"n\":1}', NULL, 'pending', 0, now() - interval '1 hour', NULL, NULL, NULL, NULL, '[]',
  now() - interval '1 hour', now() - interval '1 hour', NULL),
 ('up', '{\"n\":2}', 'order-7', 'pending', 0, now() - interval '1 hour', NULL, NULL, NULL, NULL, '[]',
  now() - interval '1 hour', now() - interval '1 hour', NULL),
 ('up', '{\"n\":3}', NULL, 'pending', 0, now() + interval '1 day', NULL, NULL, NULL, NULL, '[]',
  now() - interval '1 hour', now() - interval '1 hour', NULL),
 ('up', '{\"n\":4}', NULL, 'running', 1, now() - interval '1 hour', 'gone', gen_random_uuid(),
  now() - interval '1 minute', NULL, '[]', now() - interval '1 hour', now() - interval '2 minutes', NULL),
 ('up', '{\"n\":5}', NULL, 'running', 1, now() - interval '1 hour', 'alive', gen_random_uuid(),
  now() + interval '1 day', NULL, '[]', now() - interval '1 hour', now() - interval '2 minutes', NULL),
 ('up', '{\"n\":6}', NULL, 'completed', 1, now() - interval '1 hour', NULL, NULL, NULL, NULL, '[]',
  now() - interval '1 hour', now() - interval '30 minutes', now() - interval '30 minutes'),
 ('up', '{\"n\":7}', 'order-8', 'failed', 1, now() - interval '1 hour', NULL, NULL, NULL, 'card declined',
  '[{\"attempt\":1,\"at\":3000,\"error\":\"card declined\"}]', now() - interval '1 hour',
  now() - interval '30 minutes', now() - interval '30 minutes'),
 ('up', '{\"n\":8}', NULL, 'cancelled', 0, now() - interval '1 hour', NULL, NULL, NULL, NULL, '[]',
  now() - interval '1 hour', now() - interval '30 minutes', now() - interval '30 minutes')";

#[derive(Clone)]
struct Succeed;

impl Handler for Succeed {
    type Payload = serde_json::Value;
    type Error = Infallible;

    async fn handle(&self, _task: TaskContext, _payload: serde_json::Value) -> Result<(), Infallible> {
        Ok(())
    }
}

fn key(s: &str) -> IdempotencyKey {
    IdempotencyKey::parse(s).expect("valid key")
}

/// Every column version 1 has, of every task, as one line per task; the
/// same SQL on both backends, so it reads the table before the upgrade too.
const DUMP: &str = "
SELECT CAST(id AS TEXT) || '|' || kind || '|' || CAST(payload AS TEXT) || '|' ||
       COALESCE(idempotency_key, '-') || '|' || state || '|' || CAST(attempt AS TEXT) || '|' ||
       CAST(max_attempts AS TEXT) || '|' || CAST(run_at AS TEXT) || '|' || COALESCE(lease_owner, '-') || '|' ||
       COALESCE(CAST(lease_expires_at AS TEXT), '-') || '|' || COALESCE(last_error, '-') || '|' ||
       CAST(errors AS TEXT) || '|' || CAST(created_at AS TEXT) || '|' || CAST(updated_at AS TEXT) || '|' ||
       COALESCE(CAST(finalized_at AS TEXT), '-')
FROM ballast_tasks ORDER BY id";

/// Reads [`DUMP`] on the test's own pool.
type Dump = Box<dyn Fn() -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// Every task row of `pool`'s database, as text.
fn dump_of<DB: sqlx::Database>(pool: sqlx::Pool<DB>) -> Dump
where
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    String: sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    Box::new(move || {
        let pool = pool.clone();
        async move { sqlx::query_scalar(DUMP).fetch_all(&pool).await.expect("dump") }.boxed()
    })
}

/// Upgrades a version-1 database holding the tasks above and works them.
async fn upgrade_keeps_tasks_workable(queue: Queue, dump: Dump) {
    assert!(!queue.is_migrated().await.expect("is_migrated"), "version 1 is not the current schema");
    let rows = dump().await;
    assert_eq!(rows.len(), 8);

    queue.migrate().await.expect("upgrade");
    assert!(queue.is_migrated().await.expect("is_migrated"));
    queue.migrate().await.expect("migrating again changes nothing");
    assert_eq!(dump().await, rows, "every task kept every column");
    let all = ListFilter::default();
    let before = queue.list(&all).await.expect("list after");
    assert!(before.iter().all(|t| t.result.is_none()), "no task has a result yet");

    // Deduplication holds for the keys stored before the upgrade.
    let again = queue.enqueue(NewTask::new("up", &2).key(key("order-7"))).await.expect("enqueue");
    assert_eq!((again.id, again.created), (2, false));
    let batch = queue
        .enqueue_batch(vec![
            NewTask::new("up", &7).key(key("order-8")),
            NewTask::new("up", &9).key(key("order-9")),
            NewTask::new("up", &9).key(key("order-9")),
        ])
        .await
        .expect("enqueue_batch");
    assert_eq!((batch[0].id, batch[0].created), (7, false));
    assert!(batch[1].created && batch[1].id > 8);
    assert_eq!((batch[2].id, batch[2].created), (batch[1].id, false));

    let worker = Worker::builder(queue.clone())
        .handler("up", Succeed)
        .poll_interval(Duration::from_millis(20))
        .build()
        .expect("worker");
    let shutdown = CancellationToken::new();
    let run = tokio::spawn(worker.run(shutdown.clone()));
    // Due, keyed, rescued from an expired lease, and the new one.
    for id in [1, 2, 4, batch[1].id] {
        wait_for(&queue, id, SOON, |t| t.state == TaskState::Completed).await;
    }
    assert_eq!(queue.get(4).await.expect("get").expect("task 4").attempt, 2, "the rescue is attempt 2");
    // Admin actions reach the old tasks too.
    assert!(queue.retry(7).await.expect("retry"));
    assert!(queue.run_now(3).await.expect("run_now"));
    for id in [3, 7] {
        wait_for(&queue, id, SOON, |t| t.state == TaskState::Completed).await;
    }
    shutdown.cancel();
    let summary = run.await.expect("worker ran");
    assert_eq!(summary.completed, 6);
    assert_eq!(summary.lost, 0);

    let held = queue.get(5).await.expect("get").expect("task 5");
    assert_eq!((held.state, held.lease_owner.as_deref()), (TaskState::Running, Some("alive")));
    let untouched = |id: i64| before.iter().find(|t| t.id == id).cloned();
    for id in [5, 6, 8] {
        assert_eq!(queue.get(id).await.expect("get"), untouched(id), "task {id} is not the worker's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_database_of_version_1_upgrades_in_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("queue.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(SOON);
    let pool: SqlitePool =
        SqlitePoolOptions::new().max_connections(4).connect_with(options).await.expect("open sqlite");
    for (what, sql) in [
        (
            "migrations table",
            "CREATE TABLE ballast_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        ),
        ("version 1", SQLITE_V1),
        ("record version 1", "INSERT INTO ballast_migrations (version, applied_at) VALUES (1, 1000)"),
        ("tasks", SQLITE_TASKS),
    ] {
        sqlx::raw_sql(sql).execute(&pool).await.expect(what);
    }
    let dump = dump_of(pool.clone());
    upgrade_keeps_tasks_workable(Queue::from_sqlite(pool), dump).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_database_of_version_1_upgrades_in_place() {
    let Ok(url) = std::env::var(PG_ENV) else {
        eprintln!("skipped: {PG_ENV} not set");
        return;
    };
    let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
    let admin = PgPool::connect(&url).await.expect("connect");
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.expect("create schema");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(pg_options(&url, &schema))
        .await
        .expect("connect");
    for (what, sql) in [
        (
            "migrations table",
            "CREATE TABLE ballast_migrations (
            version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        ),
        ("version 1", PG_V1),
        ("record version 1", "INSERT INTO ballast_migrations (version) VALUES (1)"),
        ("tasks", PG_TASKS),
    ] {
        sqlx::raw_sql(sql).execute(&pool).await.expect(what);
    }
    let dump = dump_of(pool.clone());
    upgrade_keeps_tasks_workable(Queue::from_postgres(pool.clone()), dump).await;
    pool.close().await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await.expect("drop schema");
}
