//! The database a run measures: a fresh SQLite file or PostgreSQL schema,
//! and what the measurement asks of it directly.

use std::str::FromStr;

use anyhow::Context;
use ballast_queue::Queue;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::Connection;

use super::*;

/// A database for one run: a temp SQLite file or a fresh PostgreSQL schema.
pub(super) enum Db {
    Sqlite { pool: SqlitePool, options: SqliteConnectOptions, _dir: tempfile::TempDir },
    Pg { pool: PgPool, options: PgConnectOptions, schema: String, url: String },
}

pub(super) fn pg_url(url: Option<&str>) -> anyhow::Result<String> {
    match url {
        Some(url) => Ok(url.to_owned()),
        None => std::env::var(PG_ENV).with_context(|| format!("PostgreSQL needs --url or {PG_ENV}")),
    }
}

pub(super) fn pg_options(url: &str, schema: &str) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(url)?.options([("search_path", schema)]))
}

impl Db {
    pub(super) async fn open(opts: &QueueBenchOptions) -> anyhow::Result<Self> {
        match opts.backend {
            BenchBackend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let options = Queue::sqlite_options(dir.path().join("bench.db"));
                let pool = SqlitePoolOptions::new().max_connections(4).connect_with(options.clone()).await?;
                Ok(Db::Sqlite { pool, options, _dir: dir })
            }
            BenchBackend::Postgres => {
                let url = pg_url(opts.url.as_deref())?;
                let schema = format!("bench_{}", uuid::Uuid::now_v7().simple());
                let mut admin = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&mut admin).await?;
                admin.close().await?;
                let options = pg_options(&url, &schema)?;
                // The bench's own connections (setup, drain checks) never scan the table.
                let pool = PgPoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.clone().options([("enable_seqscan", "off")]))
                    .await?;
                Ok(Db::Pg { pool, options, schema, url })
            }
        }
    }

    /// A queue with a pool of its own, as `Queue::connect` would build it.
    pub(super) async fn queue(&self) -> anyhow::Result<Queue> {
        Ok(match self {
            Db::Sqlite { options, .. } => Queue::connect_sqlite(options.clone()).await?,
            // All ten connections open before anything is measured, as the
            // bare loop opens its own before its clock starts: a new
            // PostgreSQL backend costs milliseconds of CPU before its first
            // statement, which a worker pays once in its life.
            Db::Pg { options, .. } => Queue::from_postgres(
                Queue::pg_pool_options().min_connections(10).connect_with(options.clone()).await?,
            ),
        })
    }

    pub(super) async fn exec(&self, sql: &str) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { pool, .. } => {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
            Db::Pg { pool, .. } => {
                sqlx::raw_sql(sql).execute(pool).await?;
            }
        }
        Ok(())
    }

    pub(super) async fn scalar(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(match self {
            Db::Sqlite { pool, .. } => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Db::Pg { pool, .. } => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    /// Inserts `n` tasks completed a day ago, of a kind no worker claims.
    pub(super) async fn retain(&self, n: usize) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { .. } => {
                let day_ago = now_micros() - 86_400_000_000;
                self.exec(&format!(
                    "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})
                     INSERT INTO ballast_tasks (kind, payload, state, attempt, run_at, created_at, updated_at, finalized_at)
                     SELECT 'bench-history', i, 'completed', 1, {day_ago}, {day_ago}, {day_ago}, {day_ago} FROM s;
                     ANALYZE"
                ))
                .await
            }
            Db::Pg { .. } => {
                self.exec(&format!(
                    "INSERT INTO ballast_tasks (kind, payload, state, attempt, run_at, created_at, updated_at, finalized_at)
                     SELECT 'bench-history', to_jsonb(i), 'completed', 1, t, t, t, t
                     FROM generate_series(1, {n}) i, (SELECT now() - interval '1 day' AS t) d;
                     ANALYZE ballast_tasks; CHECKPOINT"
                ))
                .await
            }
        }
    }

    /// `(payload index, finalized_at µs)` of every completed task.
    pub(super) async fn finalized(&self) -> anyhow::Result<Vec<(i64, i64)>> {
        Ok(match self {
            Db::Sqlite { pool, .. } => {
                sqlx::query_as(&format!(
                    "SELECT CAST(payload AS INTEGER), finalized_at FROM ballast_tasks
                     WHERE kind = '{KIND}' AND state = 'completed'"
                ))
                .fetch_all(pool)
                .await?
            }
            Db::Pg { pool, .. } => {
                sqlx::query_as(&format!(
                    "SELECT (payload::text)::bigint, (extract(epoch FROM finalized_at) * 1000000)::bigint
                     FROM ballast_tasks WHERE kind = '{KIND}' AND state = 'completed'"
                ))
                .fetch_all(pool)
                .await?
            }
        })
    }

    pub(super) async fn cleanup(self) -> anyhow::Result<()> {
        match self {
            Db::Sqlite { pool, .. } => pool.close().await,
            Db::Pg { pool, schema, url, .. } => {
                pool.close().await;
                let mut admin = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(&format!("DROP SCHEMA {schema} CASCADE")).execute(&mut admin).await?;
                admin.close().await?;
            }
        }
        Ok(())
    }
}
