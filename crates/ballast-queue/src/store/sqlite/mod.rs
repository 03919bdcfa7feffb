//! SQLite backend. One writer at a time (WAL lets readers continue), so a claim
//! needs no `SKIP LOCKED`: the `UPDATE … RETURNING` that claims is atomic.
//! Timestamps are microseconds since the Unix epoch from this process's clock.
//!
//! Every write of the queue's own goes through the [`Engine`], one rusqlite
//! connection on a thread of its own; the sqlx pool serves the admin API,
//! migrations and the caller's transactions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sqlx::sqlite::{SqliteConnection, SqlitePool};
use sqlx::{Connection, Row};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

mod engine;
mod file;

use engine::Engine;
use file::OpenedFile;

use super::reads::{self, ReadSql};
use super::{ClaimRequest, Exchange, Lease, Store, ValidTask};
use crate::bound_keys::KeyBinding;
use crate::error::Result;
use crate::outcome::Outcome;
use crate::types::{duration_micros, micros, EnqueueOutcome, KindStats, ListFilter, TaskInfo, TaskState};

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../../migrations/sqlite/0001_tasks.sql")),
    (2, include_str!("../../../migrations/sqlite/0002_live_index.sql")),
    (3, include_str!("../../../migrations/sqlite/0003_task_result.sql")),
    (4, include_str!("../../../migrations/sqlite/0004_probe.sql")),
    (5, include_str!("../../../migrations/sqlite/0005_sequence.sql")),
    (6, include_str!("../../../migrations/sqlite/0006_pending_claim.sql")),
    (7, include_str!("../../../migrations/sqlite/0007_bound_keys.sql")),
];

/// The task columns the admin API reads.
macro_rules! columns {
    () => {
        "id, kind, payload, idempotency_key, state, attempt, max_attempts, run_at, lease_owner, \
         lease_expires_at, last_error, errors, created_at, updated_at, finalized_at, result, sequence"
    };
}

/// The admin API's reads ([`ReadSql`] says each one's binds).
const READS: ReadSql = ReadSql {
    list: concat!(
        "SELECT ",
        columns!(),
        " FROM ballast_tasks
         WHERE (?1 IS NULL OR kind = ?1 OR substr(kind, 1, length(?1) + 1) = ?1 || '/')
           AND (?2 IS NULL OR state = ?2) AND id > ?3 AND id < ?5
         ORDER BY id {order} LIMIT ?4"
    ),
    get: concat!("SELECT ", columns!(), " FROM ballast_tasks WHERE id = ?1"),
    get_by_key: concat!(
        "SELECT ",
        columns!(),
        " FROM ballast_tasks WHERE kind = ?1 AND idempotency_key = ?2"
    ),
};

fn now() -> i64 {
    micros(SystemTime::now())
}

#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// Claims, outcomes and renewals: the workers' side of the table.
    engine: Engine,
    /// The file opened, checked before a task is stored.
    file: Option<Arc<OpenedFile>>,
}

impl SqliteStore {
    /// The queue's store on `pool`'s file; `read_only` as the pool was opened.
    pub fn new(pool: SqlitePool, read_only: bool) -> Self {
        let file = OpenedFile::at(pool.connect_options().get_filename()).map(Arc::new);
        Self { engine: Engine::new(pool.clone(), read_only), pool, file }
    }

    /// `Err` if the queue's file was removed or replaced since it was opened.
    fn check_file(&self) -> Result<()> {
        self.file.as_ref().map_or(Ok(()), |file| file.check())
    }
}

/// The due time of a task held behind its sequence (see `0005_sequence.sql`).
macro_rules! held {
    () => {
        "253370764800000000"
    };
}

/// Inserts one task; held when an earlier one of its sequence (`?7`) holds
/// it. One statement: SQLite's single writer sees the sequence as it is.
const INSERT: &str = concat!(
    "INSERT INTO ballast_tasks
        (kind, payload, idempotency_key, max_attempts, run_at, created_at, updated_at, sequence)
     VALUES (?1, ?2, ?3, ?4,
             CASE WHEN ?7 IS NOT NULL AND EXISTS (
                      SELECT 1 FROM ballast_tasks
                      WHERE sequence = ?7 AND state IN ('pending', 'running', 'failed'))
                  THEN ",
    held!(),
    " ELSE ?5 END, ?6, ?6, ?7)
     ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
     RETURNING id"
);

/// Makes due (at `?1`) the first task of each sequence of the JSON array
/// `?2` (every sequence with a held task when NULL) if it is held.
/// Each sequence's head is one probe of `ballast_tasks_sequence`, which
/// holds only the tasks that hold their sequences.
const RELEASE_HELD: &str = concat!(
    "UPDATE ballast_tasks SET run_at = ?1, updated_at = ?1
     WHERE state = 'pending' AND run_at >= ",
    held!(),
    " AND id IN (
         SELECT (SELECT h.id FROM ballast_tasks h
                 WHERE h.sequence = s.value AND h.state IN ('pending', 'running', 'failed')
                 ORDER BY h.id LIMIT 1)
         FROM (SELECT value FROM json_each(?2) WHERE ?2 IS NOT NULL
               UNION
               SELECT sequence FROM ballast_tasks
               WHERE ?2 IS NULL AND finalized_at IS NULL AND run_at >= ",
    held!(),
    " AND sequence IS NOT NULL) AS s)"
);

/// Inserts one task on `conn` (the pool's, or the caller's open transaction).
pub(crate) async fn enqueue_one(conn: &mut SqliteConnection, task: &ValidTask) -> Result<EnqueueOutcome> {
    let now = now();
    let inserted: Option<i64> = sqlx::query_scalar(INSERT)
        .bind(&task.kind)
        .bind(&task.payload)
        .bind(&task.key)
        .bind(task.max_attempts)
        .bind(task.run_at.unwrap_or(now))
        .bind(now)
        .bind(&task.sequence)
        .fetch_optional(&mut *conn)
        .await?;
    if let Some(id) = inserted {
        return Ok(EnqueueOutcome { id, created: true });
    }
    let id = sqlx::query_scalar("SELECT id FROM ballast_tasks WHERE kind = ?1 AND idempotency_key = ?2")
        .bind(&task.kind)
        .bind(&task.key)
        .fetch_one(&mut *conn)
        .await?;
    Ok(EnqueueOutcome { id, created: false })
}

impl Store for SqliteStore {
    async fn migrate(&self) -> Result<()> {
        let mut conn = self.pool.acquire().await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS ballast_migrations (
                version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
        )
        .execute(&mut *conn)
        .await?;
        for &(version, sql) in MIGRATIONS {
            // IMMEDIATE takes the write lock first, so two processes migrating
            // at once queue up instead of one failing on a lock upgrade.
            let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
            let done: Option<i64> =
                sqlx::query_scalar("SELECT version FROM ballast_migrations WHERE version = ?1")
                    .bind(version)
                    .fetch_optional(&mut *tx)
                    .await?;
            if done.is_none() {
                sqlx::raw_sql(sql).execute(&mut *tx).await?;
                sqlx::query("INSERT INTO ballast_migrations (version, applied_at) VALUES (?1, ?2)")
                    .bind(version)
                    .bind(now())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    async fn is_migrated(&self) -> Result<bool> {
        Ok(self.applied_schema().await? >= MIGRATIONS.len() as i64)
    }

    async fn applied_schema(&self) -> Result<i64> {
        let mut conn = self.pool.acquire().await?;
        let has_table: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ballast_migrations'",
        )
        .fetch_optional(&mut *conn)
        .await?;
        if has_table.is_none() {
            return Ok(0);
        }
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM ballast_migrations").fetch_one(&mut *conn).await?;
        Ok(applied.unwrap_or(0))
    }

    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
        // A task stored in a file nobody will open again is lost: refused.
        self.check_file()?;
        self.engine.enqueue(tasks).await
    }

    async fn settle_and_claim(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        self.engine.settle_and_claim(outcomes, claim).await
    }

    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        self.engine.heartbeat(leases, lease).await
    }

    async fn probe_write(&self) -> Result<()> {
        self.check_file()?;
        self.engine.probe().await
    }

    async fn listen(&self, _wake: Arc<Notify>) -> Result<Option<JoinHandle<()>>> {
        Ok(None)
    }

    async fn stats(&self) -> Result<Vec<KindStats>> {
        let now = now();
        let rows = sqlx::query(
            "SELECT kind, state, COUNT(*) AS n,
                    MIN(CASE WHEN state = 'pending' AND run_at <= ?1 THEN run_at END) AS oldest_due
             FROM ballast_tasks GROUP BY kind, state ORDER BY kind",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        let mut by_kind: HashMap<String, KindStats> = HashMap::new();
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let state: String = row.try_get("state")?;
            let state = state.parse::<TaskState>().map_err(|e| sqlx::Error::Decode(e.into()))?;
            let oldest: Option<i64> = row.try_get("oldest_due")?;
            let stats = by_kind.entry(kind.clone()).or_insert_with(|| KindStats::new(kind));
            stats.add(state, row.try_get::<i64, _>("n")?);
            if let Some(due) = oldest {
                stats.oldest_due_age = Some(Duration::from_micros(now.saturating_sub(due).max(0) as u64));
            }
        }
        let mut out: Vec<KindStats> = by_kind.into_values().collect();
        out.sort_by(|a, b| a.kind.cmp(&b.kind));
        Ok(out)
    }

    async fn unfinished_by(&self, kind: &str, field: &str) -> Result<BTreeMap<String, u64>> {
        let rows = sqlx::query(
            "SELECT coalesce(json_extract(payload, '$.' || ?2), '') AS value, COUNT(*) AS n
             FROM ballast_tasks WHERE (kind = ?1 OR substr(kind, 1, length(?1) + 1) = ?1 || '/')
               AND state IN ('pending', 'running') GROUP BY value",
        )
        .bind(kind)
        .bind(field)
        .fetch_all(&self.pool)
        .await?;
        let mut out = BTreeMap::new();
        for row in rows {
            // A field holding a number or an object is not a name: counted under "".
            let value: String = row.try_get::<Option<String>, _>("value").ok().flatten().unwrap_or_default();
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
        let sql = "SELECT w.value FROM json_each(?1) AS w \
                   LEFT JOIN ballast_tasks t ON t.id = w.value \
                   WHERE t.id IS NULL OR t.state IN ('completed', 'failed', 'cancelled')";
        let ids = serde_json::to_string(ids).unwrap_or_default();
        Ok(sqlx::query_scalar(sql).bind(ids).fetch_all(&self.pool).await?)
    }

    async fn release_held(&self, sequences: Option<&[String]>) -> Result<u64> {
        self.check_file()?;
        let sequences = sequences.map(|s| serde_json::to_string(s).unwrap_or_default());
        let done = sqlx::query(RELEASE_HELD).bind(now()).bind(sequences).execute(&self.pool).await?;
        Ok(done.rows_affected())
    }

    async fn sequence_head(&self, sequence: &str) -> Result<Option<i64>> {
        let head = sqlx::query_scalar(
            "SELECT min(id) FROM ballast_tasks WHERE sequence = ?1 AND state IN ('pending', 'running', 'failed')",
        )
        .bind(sequence)
        .fetch_one(&self.pool)
        .await?;
        Ok(head)
    }

    async fn leave_sequence(&self, id: i64) -> Result<Option<String>> {
        self.check_file()?;
        let sequence: Option<Option<String>> =
            sqlx::query_scalar("SELECT sequence FROM ballast_tasks WHERE id = ?1 AND state = 'failed'")
                .bind(id)
                .fetch_optional(&self.pool)
                .await?;
        let Some(sequence) = sequence.flatten() else { return Ok(None) };
        let done = sqlx::query(
            "UPDATE ballast_tasks SET sequence = NULL, updated_at = ?3
             WHERE id = ?1 AND state = 'failed' AND sequence = ?2",
        )
        .bind(id)
        .bind(&sequence)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok((done.rows_affected() == 1).then_some(sequence))
    }

    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE ballast_tasks
             SET state = 'pending', attempt = 0, run_at = ?3, finalized_at = NULL, updated_at = ?3
             WHERE state = 'failed' AND (?1 IS NULL OR id = ?1) AND (?2 IS NULL OR kind = ?2 OR substr(kind, 1, length(?2) + 1) = ?2 || '/')",
        )
        .bind(id)
        .bind(kind)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn run_now(&self, id: i64) -> Result<bool> {
        let done = sqlx::query(concat!(
            "UPDATE ballast_tasks SET run_at = ?2, updated_at = ?2
                 WHERE id = ?1 AND state = 'pending' AND run_at < ",
            held!()
        ))
        .bind(id)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn cancel(&self, id: i64) -> Result<Option<Option<String>>> {
        Ok(sqlx::query_scalar(
            "UPDATE ballast_tasks
             SET state = 'cancelled', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                 updated_at = ?2, finalized_at = ?2
             WHERE id = ?1 AND state IN ('pending', 'running')
             RETURNING sequence",
        )
        .bind(id)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?)
    }

    async fn prune(&self, state: Option<TaskState>, older_than: Duration, limit: Option<u32>) -> Result<u64> {
        // Oldest first along the finalized index; a negative LIMIT is none.
        let done = sqlx::query(
            "DELETE FROM ballast_tasks WHERE id IN (
                 SELECT id FROM ballast_tasks
                 WHERE finalized_at IS NOT NULL AND finalized_at < ?1 AND (?2 IS NULL OR state = ?2)
                 ORDER BY finalized_at LIMIT ?3)",
        )
        .bind(now().saturating_sub(duration_micros(older_than)))
        .bind(state.map(TaskState::as_str))
        .bind(limit.map_or(-1, i64::from))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn bind_key(&self, scope: &[u8; 16], binding: &KeyBinding<'_>) -> Result<String> {
        self.check_file()?;
        let now = now();
        Ok(sqlx::query_scalar(
            "INSERT INTO ballast_bound_keys AS b (scope, fingerprint, expires_at)
             VALUES (?1, ?2, ?3)
             ON CONFLICT (scope) DO UPDATE SET
                 fingerprint = CASE WHEN b.expires_at <= ?4 THEN excluded.fingerprint ELSE b.fingerprint END,
                 expires_at = CASE WHEN b.expires_at <= ?4 THEN excluded.expires_at ELSE b.expires_at END
             RETURNING fingerprint",
        )
        .bind(&scope[..])
        .bind(binding.fingerprint)
        .bind(now.saturating_add(duration_micros(binding.expires_in)))
        .bind(now)
        .fetch_one(&self.pool)
        .await?)
    }

    async fn prune_bound_keys(&self, limit: u32) -> Result<u64> {
        let done = sqlx::query(
            "DELETE FROM ballast_bound_keys WHERE rowid IN (
                 SELECT rowid FROM ballast_bound_keys WHERE expires_at < ?1 ORDER BY expires_at LIMIT ?2)",
        )
        .bind(now())
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
