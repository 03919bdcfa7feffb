//! The bare loop the queue is compared with: claim ids `FOR UPDATE SKIP
//! LOCKED` and complete them, in two transactions, on a table of its own.

use std::time::Instant;

use sqlx::Connection;

use super::*;

/// The bare loop: `workers` concurrent loops, each claiming `batch` ids and
/// completing them in a second transaction, until the table is drained.
pub(super) async fn raw_loop(db: &Db, opts: &QueueBenchOptions) -> anyhow::Result<f64> {
    let n = opts.tasks;
    match db {
        Db::Pg { options, .. } => {
            db.exec(
                "CREATE TABLE bench_raw_tasks (
                    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    state TEXT NOT NULL DEFAULT 'pending',
                    payload JSONB NOT NULL,
                    updated_at TIMESTAMPTZ NOT NULL DEFAULT now());
                 CREATE INDEX bench_raw_tasks_pending ON bench_raw_tasks (id) WHERE state = 'pending'",
            )
            .await?;
            db.exec(&format!(
                "INSERT INTO bench_raw_tasks (payload) SELECT to_jsonb(i) FROM generate_series(1, {n}) i;
                 ANALYZE bench_raw_tasks"
            ))
            .await?;
            let mut loops = Vec::new();
            for _ in 0..opts.workers {
                let mut conn = sqlx::PgConnection::connect_with(options).await?;
                let batch = opts.batch as i64;
                loops.push(async move {
                    let mut done = 0usize;
                    loop {
                        let mut tx = conn.begin().await?;
                        let ids: Vec<i64> = sqlx::query_scalar(
                            "SELECT id FROM bench_raw_tasks WHERE state = 'pending'
                             ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
                        )
                        .bind(batch)
                        .fetch_all(&mut *tx)
                        .await?;
                        if ids.is_empty() {
                            tx.commit().await?;
                            break;
                        }
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'running', updated_at = now() WHERE id = ANY($1)",
                        )
                        .bind(&ids)
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'completed', updated_at = now()
                             WHERE id = ANY($1)",
                        )
                        .bind(&ids)
                        .execute(&mut conn)
                        .await?;
                        done += ids.len();
                    }
                    anyhow::Ok(done)
                });
            }
            drain_rate(loops, n).await
        }
        Db::Sqlite { options, .. } => {
            db.exec(
                "CREATE TABLE bench_raw_tasks (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    state TEXT NOT NULL DEFAULT 'pending',
                    payload TEXT NOT NULL,
                    updated_at INTEGER NOT NULL DEFAULT 0);
                 CREATE INDEX bench_raw_tasks_pending ON bench_raw_tasks (id) WHERE state = 'pending'",
            )
            .await?;
            db.exec(&format!(
                "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})
                 INSERT INTO bench_raw_tasks (payload) SELECT i FROM s; ANALYZE"
            ))
            .await?;
            let mut loops = Vec::new();
            for _ in 0..opts.workers {
                let mut conn = sqlx::SqliteConnection::connect_with(options).await?;
                let batch = opts.batch as i64;
                loops.push(async move {
                    let mut done = 0usize;
                    loop {
                        // IMMEDIATE: take the write lock before reading, so
                        // concurrent loops queue up instead of failing.
                        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                        let ids: Vec<i64> = sqlx::query_scalar(
                            "SELECT id FROM bench_raw_tasks WHERE state = 'pending' ORDER BY id LIMIT ?1",
                        )
                        .bind(batch)
                        .fetch_all(&mut *tx)
                        .await?;
                        if ids.is_empty() {
                            tx.commit().await?;
                            break;
                        }
                        let list = serde_json::to_string(&ids)?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'running', updated_at = ?2
                             WHERE id IN (SELECT value FROM json_each(?1))",
                        )
                        .bind(&list)
                        .bind(now_micros())
                        .execute(&mut *tx)
                        .await?;
                        tx.commit().await?;
                        sqlx::query(
                            "UPDATE bench_raw_tasks SET state = 'completed', updated_at = ?2
                             WHERE id IN (SELECT value FROM json_each(?1))",
                        )
                        .bind(&list)
                        .bind(now_micros())
                        .execute(&mut conn)
                        .await?;
                        done += ids.len();
                    }
                    anyhow::Ok(done)
                });
            }
            drain_rate(loops, n).await
        }
    }
}

/// Runs the raw loops together: tasks per second, once all `n` are done.
pub(super) async fn drain_rate(
    loops: Vec<impl std::future::Future<Output = anyhow::Result<usize>>>,
    n: usize,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    let done: usize = futures_util::future::try_join_all(loops).await?.into_iter().sum();
    let rate = done as f64 / start.elapsed().as_secs_f64();
    anyhow::ensure!(done == n, "raw loop completed {done} of {n}");
    Ok(rate)
}
