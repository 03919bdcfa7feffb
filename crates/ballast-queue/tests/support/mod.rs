//! What the conformance suite and the chaos test share: a fresh database per
//! test on either backend.

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::str::FromStr;
use std::time::Duration;

use ballast_queue::{Queue, TaskInfo};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions};
use sqlx::{Connection, Postgres, Transaction};

/// The environment variable that enables the PostgreSQL runs.
pub const PG_ENV: &str = "BALLAST_TEST_PG";

/// A migrated, empty queue in a database of its own.
pub struct Harness {
    pub queue: Queue,
    pub db: Db,
}

/// A pool for the test's own SQL, next to the queue's.
pub enum Db {
    Sqlite { pool: SqlitePool, options: SqliteConnectOptions, _dir: tempfile::TempDir },
    Pg { pool: PgPool, options: PgConnectOptions, schema: String, url: String },
}

impl Harness {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // A longer busy timeout than the default's: the chaos tests' workers
        // write from several processes at once.
        let options =
            Queue::sqlite_options(dir.path().join("queue.db")).busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone())
            .await
            .expect("open sqlite");
        let queue = Queue::from_sqlite(pool.clone());
        queue.migrate().await.expect("migrate");
        Self { queue, db: Db::Sqlite { pool, options, _dir: dir } }
    }

    /// `None` (after saying so on stderr) when `BALLAST_TEST_PG` is unset.
    pub async fn postgres() -> Option<Self> {
        let Ok(url) = std::env::var(PG_ENV) else {
            eprintln!("skipped: {PG_ENV} not set");
            return None;
        };
        let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
        let admin = PgPool::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{PG_ENV}={url} is set but PostgreSQL is unreachable: {e}"));
        sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&admin).await.expect("create schema");
        admin.close().await;
        let options = pg_options(&url, &schema);
        let pool =
            PgPoolOptions::new().max_connections(8).connect_with(options.clone()).await.expect("connect");
        let queue = Queue::from_postgres(pool.clone());
        queue.migrate().await.expect("migrate");
        Some(Self { queue, db: Db::Pg { pool, options, schema, url } })
    }

    pub fn is_pg(&self) -> bool {
        matches!(self.db, Db::Pg { .. })
    }

    /// Another queue on the same database with a pool of its own, as another
    /// process would have.
    pub async fn other_queue(&self) -> Queue {
        match &self.db {
            Db::Sqlite { options, .. } => Queue::from_sqlite(
                SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.clone())
                    .await
                    .expect("open"),
            ),
            Db::Pg { options, .. } => Queue::from_postgres(
                PgPoolOptions::new().max_connections(4).connect_with(options.clone()).await.expect("connect"),
            ),
        }
    }

    /// Runs a statement without parameters.
    pub async fn exec(&self, sql: &str) {
        match &self.db {
            Db::Sqlite { pool, .. } => sqlx::raw_sql(sql).execute(pool).await.map(drop),
            Db::Pg { pool, .. } => sqlx::raw_sql(sql).execute(pool).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Runs a query returning one integer.
    pub async fn scalar(&self, sql: &str) -> i64 {
        match &self.db {
            Db::Sqlite { pool, .. } => sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await,
            Db::Pg { pool, .. } => sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await,
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Makes every running task's lease look expired, as if its worker had
    /// stopped renewing it.
    pub async fn expire_leases(&self) {
        match self.db {
            Db::Sqlite { .. } => self.exec("UPDATE ballast_tasks SET lease_expires_at = 0 WHERE state = 'running'").await,
            Db::Pg { .. } => {
                self.exec("UPDATE ballast_tasks SET lease_expires_at = now() - interval '1 hour' WHERE state = 'running'")
                    .await
            }
        }
    }

    /// Keeps every other connection from writing to the queue's table until
    /// released (claims, renewals and outcomes wait; reads go on), as a
    /// database that stopped answering would.
    pub async fn lock_writes(&self) -> WriteLock {
        match &self.db {
            Db::Sqlite { options, .. } => {
                let mut conn = SqliteConnection::connect_with(options).await.expect("open sqlite");
                sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut conn).await.expect("take the write lock");
                WriteLock::Sqlite(conn)
            }
            Db::Pg { pool, .. } => {
                let mut tx = pool.begin().await.expect("begin");
                sqlx::raw_sql("LOCK TABLE ballast_tasks IN EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await
                    .expect("lock the table");
                WriteLock::Pg(tx)
            }
        }
    }

    /// Returns once a write to the queue's table waits on a [`WriteLock`].
    /// PostgreSQL shows its waiters; SQLite does not, so there this gives a
    /// worker started just before ample time to have sent its claim.
    pub async fn wait_for_blocked_write(&self) {
        match self.db {
            Db::Sqlite { .. } => tokio::time::sleep(Duration::from_secs(1)).await,
            Db::Pg { .. } => {
                let waiting =
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'ballast_tasks'::regclass";
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                while self.scalar(waiting).await == 0 {
                    assert!(tokio::time::Instant::now() < deadline, "no write ever waited on the lock");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// Drops the PostgreSQL schema; the SQLite file goes with its temp dir.
    pub async fn cleanup(self) {
        if let Db::Pg { pool, schema, url, .. } = self.db {
            pool.close().await;
            let admin = PgPool::connect(&url).await.expect("connect");
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&admin).await.expect("drop schema");
        }
    }
}

/// See [`Harness::lock_writes`].
pub enum WriteLock {
    Sqlite(SqliteConnection),
    Pg(Transaction<'static, Postgres>),
}

impl WriteLock {
    pub async fn release(self) {
        match self {
            WriteLock::Sqlite(mut conn) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.expect("release the write lock");
            }
            WriteLock::Pg(tx) => tx.rollback().await.expect("release the table lock"),
        }
    }
}

pub fn pg_options(url: &str, schema: &str) -> PgConnectOptions {
    PgConnectOptions::from_str(url).expect("valid BALLAST_TEST_PG url").options([("search_path", schema)])
}

/// Polls `id` until `done` holds, for up to `within`.
pub async fn wait_for(
    queue: &Queue,
    id: i64,
    within: Duration,
    done: impl Fn(&TaskInfo) -> bool,
) -> TaskInfo {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let task = queue.get(id).await.expect("get").expect("task exists");
        if done(&task) {
            return task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} did not get there in {within:?}: {task:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
