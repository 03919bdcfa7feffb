//! `Queue::connect_read_only`: looking into a queue changes nothing in its
//! database, and a write through it is refused.

mod support;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use ballast_queue::{Error, ListFilter, NewTask, Queue, TaskState};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{ConnectOptions as _, Connection as _};
use support::{Db, Harness};

/// A migrated queue file in SQLite's default rollback-journal mode (as a
/// database made by another tool, or copied for inspection, may be), holding
/// three tasks of kind `sms` (the second already due to fail) and one `charge`.
async fn delete_mode_queue(dir: &Path) -> String {
    let path = dir.join("tasks.db");
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Delete);
    let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
    let queue = Queue::from_sqlite(pool.clone());
    queue.migrate().await.unwrap();
    for text in ["one", "two", "three"] {
        queue.enqueue(NewTask::new("sms", text)).await.unwrap();
    }
    queue.enqueue(NewTask::new("charge", &100)).await.unwrap();
    sqlx::query("UPDATE ballast_tasks SET state = 'failed', finalized_at = 1 WHERE id = 2")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    format!("sqlite://{}", path.display())
}

/// The journal mode recorded in the file, read without changing it.
async fn journal_mode(url: &str) -> String {
    let mut conn = SqliteConnectOptions::from_str(url).unwrap().read_only(true).connect().await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    mode
}

fn file(url: &str) -> Vec<u8> {
    std::fs::read(url.trim_start_matches("sqlite://")).unwrap()
}

#[tokio::test]
async fn reading_a_sqlite_queue_leaves_its_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let url = delete_mode_queue(dir.path()).await;
    assert_eq!(journal_mode(&url).await, "delete");
    let before = file(&url);

    let queue = Queue::connect_read_only(&url).await.unwrap();
    let stats = queue.stats().await.unwrap();
    let counts: Vec<_> = stats.iter().map(|s| (s.kind.as_str(), s.pending, s.failed)).collect();
    assert_eq!(counts, [("charge", 1, 0), ("sms", 2, 1)]);
    let failed = queue.list(&ListFilter::default().state(TaskState::Failed)).await.unwrap();
    assert_eq!(failed.iter().map(|t| t.id).collect::<Vec<_>>(), [2]);
    assert_eq!(queue.get(4).await.unwrap().unwrap().kind, "charge");
    drop(queue);

    assert_eq!(journal_mode(&url).await, "delete", "the journal mode is the file's, not the reader's");
    assert!(file(&url) == before, "the file changed by being read");
}

#[tokio::test]
async fn a_read_only_sqlite_queue_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let url = delete_mode_queue(dir.path()).await;
    let before = file(&url);
    let queue = Queue::connect_read_only(&url).await.unwrap();

    let refused = |what: &str, result: Result<(), Error>| match result {
        Err(Error::Database(e)) => {
            assert!(e.to_string().contains("readonly database"), "{what}: {e}")
        }
        other => panic!("{what} on a read-only queue: {other:?}"),
    };
    refused("enqueue", queue.enqueue(NewTask::new("sms", "four")).await.map(drop));
    refused("retry", queue.retry(2).await.map(drop));
    refused("cancel", queue.cancel(1).await.map(drop));
    refused("prune", queue.prune(Duration::ZERO).await.map(drop));
    drop(queue);

    assert_eq!(journal_mode(&url).await, "delete");
    assert!(file(&url) == before, "a refused write changed the file");
}

#[tokio::test]
async fn a_read_only_sqlite_queue_is_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let err = Queue::connect_read_only(&format!("sqlite://{}", path.display())).await.unwrap_err();
    assert!(matches!(&err, Error::NoDatabase { path: p } if *p == path), "{err:?}");
    assert!(err.to_string().starts_with(&format!("no SQLite database at {path:?}")), "{err}");
    assert!(!path.exists(), "a read-only open created {path:?}");
}

/// The service keeps its queue in WAL mode: `ballast queue stats` reads it
/// while the service writes, and after it stopped.
#[tokio::test]
async fn a_read_only_queue_reads_a_wal_queue_during_and_after_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let writer: SqlitePool = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::from_str(&url)
                .unwrap()
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .unwrap();
    let service = Queue::from_sqlite(writer.clone());
    service.migrate().await.unwrap();
    service.enqueue(NewTask::new("sms", "one")).await.unwrap();

    let reader = Queue::connect_read_only(&url).await.unwrap();
    assert_eq!(reader.stats().await.unwrap()[0].pending, 1);
    service.enqueue(NewTask::new("sms", "two")).await.unwrap();
    assert_eq!(reader.stats().await.unwrap()[0].pending, 2, "the reader sees new commits");
    drop(reader);

    writer.close().await;
    let reader = Queue::connect_read_only(&url).await.unwrap();
    assert_eq!(reader.list(&ListFilter::default()).await.unwrap().len(), 2);
    assert_eq!(journal_mode(&url).await, "wal");
}

#[tokio::test]
async fn a_read_only_postgres_queue_reads_and_refuses_writes() {
    let Some(h) = Harness::postgres().await else { return };
    let Db::Pg { url, schema, .. } = &h.db else { unreachable!("a PostgreSQL harness") };
    h.queue.enqueue(NewTask::new("sms", "one")).await.unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let queue = Queue::connect_read_only(&format!("{url}{sep}options[search_path]={schema}")).await.unwrap();

    assert_eq!(queue.stats().await.unwrap()[0].pending, 1);
    assert_eq!(queue.list(&ListFilter::default()).await.unwrap().len(), 1);
    match queue.enqueue(NewTask::new("sms", "two")).await {
        Err(Error::Database(e)) => assert!(e.to_string().contains("read-only transaction"), "{e}"),
        other => panic!("enqueue on a read-only queue: {other:?}"),
    }
    assert_eq!(h.scalar("SELECT count(*) FROM ballast_tasks").await, 1);
    drop(queue);
    h.cleanup().await;
}
