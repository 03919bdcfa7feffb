//! PostgreSQL backend, for many workers on many hosts. Claims lock due rows
//! with `FOR UPDATE SKIP LOCKED` so concurrent workers never wait on, or take,
//! each other's tasks; all times come from the database's `now()`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgListener, PgPool};
use sqlx::Row;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

mod settle;
mod sql;

use settle::split;
use sql::*;

use super::reads;
use super::{ClaimRequest, Exchange, Lease, Store, ValidTask};
use crate::bound_keys::KeyBinding;
use crate::error::Result;
use crate::outcome::Outcome;
use crate::types::{duration_micros, EnqueueOutcome, KindStats, ListFilter, TaskInfo, TaskState};

#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pool: PgPool,
    statements: Statements,
}

impl PgStore {
    pub fn new(pool: PgPool) -> Self {
        Self { pool, statements: Statements::default() }
    }
}

/// Inserts one task on `conn` (the pool's, or the caller's open transaction).
/// A task of a sequence takes the sequence's lock first: `conn` must be in
/// a transaction for it to hold until the task is committed.
pub(crate) async fn enqueue_one(conn: &mut PgConnection, task: &ValidTask) -> Result<EnqueueOutcome> {
    if let Some(sequence) = &task.sequence {
        sqlx::query(LOCK_SEQUENCE).bind([sequence]).execute(&mut *conn).await?;
    }
    let inserted: Option<i64> = sqlx::query_scalar(INSERT)
        .bind(&task.kind)
        .bind(&task.payload)
        .bind(&task.key)
        .bind(task.max_attempts)
        .bind(task.run_at)
        .bind(&task.sequence)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(id) = inserted {
        return Ok(EnqueueOutcome { id, created: true });
    }
    let id = sqlx::query_scalar("SELECT id FROM ballast_tasks WHERE kind = $1 AND idempotency_key = $2")
        .bind(&task.kind)
        .bind(&task.key)
        .fetch_one(&mut *conn)
        .await?;
    Ok(EnqueueOutcome { id, created: false })
}

impl PgStore {
    /// Tasks of which some are in sequences, one by one in one transaction,
    /// under the locks of all their sequences taken first, in the order of
    /// their names — the order the workers' release of held tasks takes
    /// them in (C5): two transactions never wait on each other's sequences
    /// in a circle.
    async fn enqueue_in_sequences(&self, tasks: &[ValidTask]) -> Result<Vec<EnqueueOutcome>> {
        let mut sequences: Vec<&str> = tasks.iter().filter_map(|t| t.sequence.as_deref()).collect();
        sequences.sort_unstable();
        sequences.dedup();
        let mut tx = self.pool.begin().await?;
        sqlx::query(LOCK_SEQUENCE).bind(&sequences).execute(&mut *tx).await?;
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(enqueue_one(&mut tx, task).await?);
        }
        tx.commit().await?;
        Ok(out)
    }
}

/// `attempt` run again (at most [`RETRIES`] times) when PostgreSQL aborts
/// it for a deadlock or a serialization conflict; if it still is, the error
/// says so ([`crate::Error::Conflict`]), naming `what`.
pub(super) async fn retried<T, F, Fut, E>(what: &'static str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
    E: Into<crate::Error>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await.map_err(Into::into) {
            Err(crate::Error::Database(sqlx::Error::Database(e)))
                if e.code().is_some_and(|c| RETRIED_STATES.contains(&&*c)) =>
            {
                if tries > RETRIES {
                    return Err(crate::Error::Conflict { what, tries, source: sqlx::Error::Database(e) });
                }
                tracing::debug!(error = %e, what, "aborted by PostgreSQL (deadlock or conflict); sent again");
            }
            other => return other,
        }
    }
}

impl PgStore {
    /// Every pending migration, in one transaction.
    async fn migrate_once(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await?;
        sqlx::query(&format!("SET LOCAL lock_timeout = '{}ms'", MIGRATION_LOCK_WAIT.as_millis()))
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS ballast_migrations (
                version BIGINT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )
        .execute(&mut *tx)
        .await?;
        for &(version, sql) in MIGRATIONS {
            let done: Option<i64> =
                sqlx::query_scalar("SELECT version FROM ballast_migrations WHERE version = $1")
                    .bind(version)
                    .fetch_optional(&mut *tx)
                    .await?;
            if done.is_none() {
                sqlx::raw_sql(sql).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO ballast_migrations (version) VALUES ($1)")
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await?;
        Ok(())
    }
}

/// How long a migration waits for a lock the running workers hold.
const MIGRATION_LOCK_WAIT: Duration = Duration::from_secs(2);

/// SQLSTATE of a lock not granted within `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Tries of a migration that met the running workers' locks, and the waits between.
const MIGRATION_TRIES: u32 = 10;
const MIGRATION_BACKOFF: Duration = Duration::from_millis(100);
const MIGRATION_BACKOFF_CAP: Duration = Duration::from_secs(5);

impl Store for PgStore {
    async fn migrate(&self) -> Result<()> {
        // Replicas of the previous version keep working while a new one
        // migrates (a rolling upgrade): a migration that needs a table lock
        // waits for it at most MIGRATION_LOCK_WAIT, so it never stalls their
        // statements queued behind it for long, and one that deadlocks with
        // them or waits too long is rolled back and tried again.
        let mut wait = MIGRATION_BACKOFF;
        let mut tries = 0;
        loop {
            match self.migrate_once().await {
                Err(crate::Error::Database(sqlx::Error::Database(e)))
                    if tries < MIGRATION_TRIES
                        && e.code()
                            .is_some_and(|c| RETRIED_STATES.contains(&&*c) || c == LOCK_NOT_AVAILABLE) =>
                {
                    tries += 1;
                    tracing::info!(error = %e, tries, "a migration met the running workers' locks; trying again");
                    tokio::time::sleep(wait + wait.mul_f64(rand::random::<f64>())).await;
                    wait = (wait * 2).min(MIGRATION_BACKOFF_CAP);
                }
                other => return other,
            }
        }
    }

    async fn is_migrated(&self) -> Result<bool> {
        Ok(self.applied_schema().await? >= MIGRATIONS.len() as i64)
    }

    async fn applied_schema(&self) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        // Resolved through search_path, as the queue's own statements are.
        let has_table: bool = sqlx::query_scalar("SELECT to_regclass('ballast_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
        if !has_table {
            return Ok(0);
        }
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM ballast_migrations").fetch_one(&mut *conn).await?;
        Ok(applied.unwrap_or(0))
    }

    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
        if tasks.iter().any(|t| t.sequence.is_some()) {
            return retried("an enqueue", || self.enqueue_in_sequences(&tasks)).await;
        }
        if tasks.len() <= 1 {
            let mut conn = self.pool.acquire().await?;
            return match tasks.first() {
                Some(task) => Ok(vec![enqueue_one(&mut conn, task).await?]),
                None => Ok(Vec::new()),
            };
        }
        let mut tx = self.pool.begin().await?;
        let rows: Vec<(i64, bool)> = sqlx::query_as(ENQUEUE_BATCH)
            .bind(tasks.iter().map(|t| t.kind.as_str()).collect::<Vec<_>>())
            .bind(tasks.iter().map(|t| t.payload.as_str()).collect::<Vec<_>>())
            .bind(tasks.iter().map(|t| t.key.as_deref()).collect::<Vec<_>>())
            .bind(tasks.iter().map(|t| t.max_attempts).collect::<Vec<_>>())
            .bind(tasks.iter().map(|t| t.run_at).collect::<Vec<_>>())
            .fetch_all(&mut *tx)
            .await?;
        if rows.len() != tasks.len() {
            return Err(sqlx::Error::RowNotFound.into());
        }
        // Tasks refused by ON CONFLICT: an earlier task of this batch with the
        // same (kind, key) if any, else the stored one (looked up in a new
        // statement, which sees a conflicting task committed meanwhile).
        let mut out = Vec::with_capacity(tasks.len());
        let mut missing = Vec::new();
        for (i, (task, &(id, created))) in tasks.iter().zip(&rows).enumerate() {
            if created {
                out.push(EnqueueOutcome { id, created });
                continue;
            }
            let earlier = tasks[..i]
                .iter()
                .zip(&out)
                .find(|(t, o)| o.created && t.kind == task.kind && t.key == task.key)
                .map(|(_, o)| o.id);
            match earlier {
                Some(id) => out.push(EnqueueOutcome { id, created: false }),
                None => {
                    missing.push(i);
                    out.push(EnqueueOutcome { id: 0, created: false });
                }
            }
        }
        for i in missing {
            out[i].id =
                sqlx::query_scalar("SELECT id FROM ballast_tasks WHERE kind = $1 AND idempotency_key = $2")
                    .bind(&tasks[i].kind)
                    .bind(&tasks[i].key)
                    .fetch_one(&mut *tx)
                    .await?;
        }
        tx.commit().await?;
        Ok(out)
    }

    async fn settle_and_claim(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        self.settle_and_claim_retried(outcomes, claim).await
    }

    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        let (ids, tokens) = split(leases);
        let extended: Vec<(i64, Uuid)> = retried("a lease renewal", || {
            sqlx::query_as(HEARTBEAT)
                .bind(&ids)
                .bind(&tokens)
                .bind(duration_micros(lease))
                .fetch_all(&self.pool)
        })
        .await?;
        Ok(extended.into_iter().map(|(id, token)| Lease { id, token }).collect())
    }

    async fn probe_write(&self) -> Result<()> {
        sqlx::query(PROBE).execute(&self.pool).await?;
        Ok(())
    }

    async fn listen(&self, wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(Some(tokio::spawn(async move {
            loop {
                match listener.recv().await {
                    Ok(_) => wake.notify_one(),
                    Err(e) => {
                        // recv() reconnects on the next call; polling covers the gap.
                        tracing::warn!(error = %e, "LISTEN connection lost; reconnecting, polling meanwhile");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        })))
    }

    async fn stats(&self) -> Result<Vec<KindStats>> {
        let rows = sqlx::query(
            "SELECT kind, state, count(*) AS n,
                    (extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending' AND run_at <= now()))
                     * 1000000)::bigint AS oldest_due_age
             FROM ballast_tasks GROUP BY kind, state ORDER BY kind",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<KindStats> = Vec::new();
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let state: String = row.try_get("state")?;
            let state = state.parse::<TaskState>().map_err(|e| sqlx::Error::Decode(e.into()))?;
            if out.last().is_none_or(|s| s.kind != kind) {
                out.push(KindStats::new(kind));
            }
            if let Some(stats) = out.last_mut() {
                stats.add(state, row.try_get::<i64, _>("n")?);
                if let Some(age) = row.try_get::<Option<i64>, _>("oldest_due_age")? {
                    stats.oldest_due_age = Some(Duration::from_micros(age.max(0) as u64));
                }
            }
        }
        Ok(out)
    }

    async fn unfinished_by(&self, kind: &str, field: &str) -> Result<BTreeMap<String, u64>> {
        let rows = sqlx::query(
            "SELECT coalesce(payload ->> $2, '') AS value, count(*) AS n
             FROM ballast_tasks WHERE (kind = $1 OR left(kind, length($1) + 1) = $1 || '/')
               AND state IN ('pending', 'running') GROUP BY value",
        )
        .bind(kind)
        .bind(field)
        .fetch_all(&self.pool)
        .await?;
        let mut out = BTreeMap::new();
        for row in rows {
            let value: String = row.try_get("value")?;
            *out.entry(value).or_insert(0) += row.try_get::<i64, _>("n")?.max(0) as u64;
        }
        Ok(out)
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<TaskInfo>> {
        reads::list(&self.pool, READS.list, filter).await
    }

    async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        reads::one(&self.pool, sqlx::query(READS.get).bind(id)).await
    }

    async fn get_by_key(&self, kind: &str, key: &str) -> Result<Option<TaskInfo>> {
        reads::one(&self.pool, sqlx::query(READS.get_by_key).bind(kind).bind(key)).await
    }

    async fn ended_among(&self, ids: &[i64]) -> Result<Vec<i64>> {
        let sql = "SELECT w.id FROM unnest($1::bigint[]) AS w(id) \
                   LEFT JOIN ballast_tasks t ON t.id = w.id \
                   WHERE t.id IS NULL OR t.state IN ('completed', 'failed', 'cancelled')";
        Ok(sqlx::query_scalar(sql).bind(ids).fetch_all(&self.pool).await?)
    }

    async fn release_held(&self, sequences: Option<&[String]>) -> Result<u64> {
        let released: i64 = sqlx::query_scalar(RELEASE_HELD).bind(sequences).fetch_one(&self.pool).await?;
        Ok(u64::try_from(released).unwrap_or_default())
    }

    async fn sequence_head(&self, sequence: &str) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(SEQUENCE_HEAD).bind(sequence).fetch_one(&self.pool).await?)
    }

    async fn leave_sequence(&self, id: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(LEAVE_SEQUENCE).bind(id).fetch_optional(&self.pool).await?)
    }

    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE ballast_tasks
             SET state = 'pending', attempt = 0, run_at = now(), finalized_at = NULL, updated_at = now()
             WHERE state = 'failed' AND ($1::bigint IS NULL OR id = $1) AND ($2::text IS NULL OR kind = $2 OR left(kind, length($2) + 1) = $2 || '/')",
        )
        .bind(id)
        .bind(kind)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            notify(&self.pool).await?;
        }
        Ok(done.rows_affected())
    }

    async fn run_now(&self, id: i64) -> Result<bool> {
        let done = sqlx::query(RUN_NOW).bind(id).execute(&self.pool).await?;
        if done.rows_affected() > 0 {
            notify(&self.pool).await?;
        }
        Ok(done.rows_affected() == 1)
    }

    async fn cancel(&self, id: i64) -> Result<Option<Option<String>>> {
        Ok(sqlx::query_scalar(
            "UPDATE ballast_tasks
             SET state = 'cancelled', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                 updated_at = now(), finalized_at = now()
             WHERE id = $1 AND state IN ('pending', 'running')
             RETURNING sequence",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn prune(&self, state: Option<TaskState>, older_than: Duration, limit: Option<u32>) -> Result<u64> {
        // Oldest first along the finalized index; LIMIT NULL is none.
        let done = sqlx::query(
            "DELETE FROM ballast_tasks WHERE id IN (
                 SELECT id FROM ballast_tasks
                 WHERE finalized_at IS NOT NULL
                   AND finalized_at < now() - $1 * interval '1 microsecond'
                   AND ($2::text IS NULL OR state = $2)
                 ORDER BY finalized_at LIMIT $3)",
        )
        .bind(duration_micros(older_than))
        .bind(state.map(TaskState::as_str))
        .bind(limit.map(i64::from))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn bind_key(&self, scope: &[u8; 16], binding: &KeyBinding<'_>) -> Result<String> {
        Ok(sqlx::query_scalar(
            "INSERT INTO ballast_bound_keys AS b (scope, fingerprint, expires_at)
             VALUES ($1, $2, now() + $3 * interval '1 microsecond')
             ON CONFLICT (scope) DO UPDATE SET
                 fingerprint = CASE WHEN b.expires_at <= now() THEN excluded.fingerprint ELSE b.fingerprint END,
                 expires_at = CASE WHEN b.expires_at <= now() THEN excluded.expires_at ELSE b.expires_at END
             RETURNING fingerprint",
        )
        .bind(&scope[..])
        .bind(binding.fingerprint)
        .bind(duration_micros(binding.expires_in))
        .fetch_one(&self.pool)
        .await?)
    }

    async fn prune_bound_keys(&self, limit: u32) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM ballast_bound_keys WHERE scope IN (
                 SELECT scope FROM ballast_bound_keys WHERE expires_at < now() ORDER BY expires_at LIMIT $1)",
        )
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}

/// Wakes listening workers after an update made tasks due (inserts notify by trigger).
async fn notify(pool: &PgPool) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')").bind(CHANNEL).execute(pool).await?;
    Ok(())
}
