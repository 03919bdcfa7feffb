//! PostgreSQL backend, for many workers on many hosts. Claims lock due rows
//! with `FOR UPDATE SKIP LOCKED` so concurrent workers never wait on, or take,
//! each other's tasks; all times come from the database's `now()`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sqlx::postgres::{PgConnection, PgListener, PgPool, PgRow};
use sqlx::Row;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{ClaimRequest, ClaimedTask, Exchange, Lease, Store, ValidTask};
use crate::error::Result;
use crate::outcome::Outcome;
use crate::types::{
    duration_micros, from_micros, EnqueueOutcome, KindStats, ListFilter, TaskInfo, TaskState,
};

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../migrations/postgres/0001_tasks.sql")),
    (2, include_str!("../../migrations/postgres/0002_live_index.sql")),
    (3, include_str!("../../migrations/postgres/0003_task_result.sql")),
    (4, include_str!("../../migrations/postgres/0004_probe.sql")),
];

/// Serializes concurrent `migrate()` calls across processes.
const MIGRATION_LOCK: i64 = 0x6261_6c6c_6173_7401;

/// The channel the insert trigger notifies.
const CHANNEL: &str = "ballast_tasks";

const COLUMNS: &str = "id, kind, payload::text AS payload, idempotency_key, state, attempt, max_attempts, \
     (extract(epoch FROM run_at) * 1000000)::bigint AS run_at, lease_owner, \
     (extract(epoch FROM lease_expires_at) * 1000000)::bigint AS lease_expires_at, last_error, \
     errors::text AS errors, (extract(epoch FROM created_at) * 1000000)::bigint AS created_at, \
     (extract(epoch FROM updated_at) * 1000000)::bigint AS updated_at, \
     (extract(epoch FROM finalized_at) * 1000000)::bigint AS finalized_at, result::text AS result";

/// Settles a batch of outcomes and claims the next batch in one statement,
/// so a busy worker pays one round trip and one commit per batch.
///
/// The outcomes arrive as parallel arrays, one element per task: id, lease
/// token, outcome (`c` completed, `r` rescheduled, `f` failed, `x` released),
/// result (JSON text), delay (µs), error, counted, sorted by id. Each row
/// changes only while it is still `running` under its token; the leases it
/// returns (id and token: two outcomes of one task, a stale attempt's and
/// the current one's, are told apart) are the outcomes applied. The token
/// stays on a settled row until a claim replaces it, so an outcome this
/// worker wrote in a round trip whose answer was lost is recognised when it
/// writes it again ([`WRITTEN`]).
///
/// The settle runs to its end before the claim starts (the claim reads its
/// count: an init plan), and takes its rows in id order; the claim never
/// waits (`SKIP LOCKED`). So two workers' statements cannot wait on each
/// other in a circle: a claim that took a row another settle needs does not
/// wait for anything before it commits.
///
/// One walk of the live index, in `run_at` order, finds both due pending
/// tasks and running ones whose lease expired (a running task's `run_at` is
/// in the past, so an expired one comes early); rows settled here are never
/// re-claimed. The claim changes no indexed column, so its row versions can
/// be HOT.
///
/// The claim's `LIMIT` is written into the text (`{limit}`, see
/// [`Statements`]) and the claimed rows are found by `id = ANY(ARRAY(…))`,
/// an index lookup however many there are: every part keeps its plan
/// whatever the parameters are, so PostgreSQL soon runs the prepared
/// statement on its generic plan instead of planning it anew for each batch.
/// With the limit a parameter, the generic plan guesses a tenth of the table
/// and is never chosen, and planning each batch cost a fifth of the
/// statement's CPU.
const SETTLE_AND_CLAIM: &str = "
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bool[])
        AS i(id, token, outcome, result, delay, error, counted)
),
settled AS (
    UPDATE ballast_tasks t
    SET state = CASE i.outcome WHEN 'c' THEN 'completed' WHEN 'f' THEN 'failed' ELSE 'pending' END,
        result = CASE WHEN i.outcome = 'c' THEN coalesce(i.result::jsonb, t.result) ELSE t.result END,
        run_at = CASE i.outcome WHEN 'r' THEN now() + i.delay * interval '1 microsecond'
                                WHEN 'x' THEN now() ELSE t.run_at END,
        attempt = CASE WHEN i.outcome = 'x' OR (i.outcome = 'r' AND NOT i.counted)
                       THEN greatest(t.attempt - 1, 0) ELSE t.attempt END,
        last_error = coalesce(i.error, t.last_error),
        errors = CASE WHEN i.error IS NULL THEN t.errors
                 ELSE (CASE WHEN jsonb_array_length(t.errors) >= 10 THEN t.errors - 0 ELSE t.errors END)
                      || jsonb_build_array(jsonb_build_object('attempt', t.attempt,
                             'at', (extract(epoch FROM now()) * 1000000)::bigint, 'error', i.error)) END,
        finalized_at = CASE WHEN i.outcome IN ('c', 'f') THEN now() END,
        lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
    FROM input i
    WHERE t.id = i.id AND t.lease_token = i.token AND t.state = 'running'
    RETURNING t.id, i.token
),
picked AS (
    SELECT id FROM ballast_tasks
    WHERE finalized_at IS NULL AND run_at <= now() AND kind = ANY($8)
      AND (state = 'pending' OR (lease_expires_at <= now() AND id <> ALL($1)))
      AND (SELECT count(*) FROM settled) >= 0
    ORDER BY run_at
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE ballast_tasks t
    SET state = 'running', attempt = t.attempt + 1, lease_owner = $9,
        lease_token = gen_random_uuid(), lease_expires_at = now() + $10 * interval '1 microsecond',
        updated_at = now()
    WHERE t.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING t.id, t.kind, t.payload::text AS payload, t.idempotency_key, t.attempt,
              t.max_attempts, t.lease_token
)
SELECT true AS claimed, id, kind, payload, idempotency_key, attempt, max_attempts, lease_token
FROM claimed
UNION ALL
SELECT false, id, NULL, NULL, NULL, NULL, NULL, token FROM settled";

/// Of the leases given, those whose own outcome is already written: the
/// task is no longer running and still carries the attempt's token.
const WRITTEN: &str = "
SELECT t.id, t.lease_token FROM ballast_tasks t
JOIN unnest($1::bigint[], $2::uuid[]) AS c(id, token) ON t.id = c.id AND t.lease_token = c.token
WHERE t.state <> 'running'";

/// The monitor's write (see `0004_probe.sql`).
const PROBE: &str = "INSERT INTO ballast_probe (id, probes) VALUES (1, 1)
    ON CONFLICT (id) DO UPDATE SET probes = ballast_probe.probes + 1";

/// SQLSTATEs of a transaction PostgreSQL aborted to break a deadlock or a
/// serialization conflict: retried at once, not reported.
const RETRIED_STATES: [&str; 2] = ["40P01", "40001"];

/// How many times a settle-and-claim PostgreSQL aborted is sent again
/// before the error is the worker's to report.
const RETRIES: usize = 3;

/// Inserts a whole batch in one statement. Each task gets its id from the
/// identity sequence up front, so every input row is reported, in order, with
/// whether it was inserted or refused by `ON CONFLICT` (an existing task with
/// the same kind and key, or an earlier one in the same batch).
const ENQUEUE_BATCH: &str = "
WITH input AS MATERIALIZED (
    SELECT nextval((SELECT pg_get_serial_sequence('ballast_tasks', 'id'))::regclass) AS id, i.*
    FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[]) WITH ORDINALITY
        AS i(kind, payload, key, max_attempts, run_at, ord)
),
ins AS (
    INSERT INTO ballast_tasks (id, kind, payload, idempotency_key, max_attempts, run_at)
    OVERRIDING SYSTEM VALUE
    SELECT id, kind, payload::jsonb, key, max_attempts,
           COALESCE(timestamptz 'epoch' + run_at * interval '1 microsecond', now())
    FROM input ORDER BY ord
    ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id
)
SELECT input.id, ins.id IS NOT NULL AS created
FROM input LEFT JOIN ins ON ins.id = input.id
ORDER BY input.ord";

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

/// [`SETTLE_AND_CLAIM`]'s text for each claim limit asked for so far: one
/// prepared statement per limit and connection (sqlx keeps them), at most
/// as many as a worker's batch size.
#[derive(Debug, Clone, Default)]
struct Statements(Arc<Mutex<HashMap<usize, Arc<str>>>>);

impl Statements {
    fn settle_and_claim(&self, limit: usize) -> Arc<str> {
        let mut texts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let text = texts
            .entry(limit)
            .or_insert_with(|| SETTLE_AND_CLAIM.replace("{limit}", &limit.to_string()).into());
        Arc::clone(text)
    }
}

fn split(leases: &[Lease]) -> (Vec<i64>, Vec<Uuid>) {
    leases.iter().map(|l| (l.id, l.token)).unzip()
}

/// Inserts one task on `conn` (the pool's, or the caller's open transaction).
pub(crate) async fn enqueue_one(conn: &mut PgConnection, task: &ValidTask) -> Result<EnqueueOutcome> {
    let inserted: Option<i64> = sqlx::query_scalar(
        "INSERT INTO ballast_tasks (kind, payload, idempotency_key, max_attempts, run_at)
         VALUES ($1, $2::jsonb, $3, $4,
                 COALESCE(timestamptz 'epoch' + $5 * interval '1 microsecond', now()))
         ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING id",
    )
    .bind(&task.kind)
    .bind(&task.payload)
    .bind(&task.key)
    .bind(task.max_attempts)
    .bind(task.run_at)
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

/// [`SETTLE_AND_CLAIM`] (as `sql`, its limit written in) on `conn`; wakes
/// other workers if it released tasks.
async fn settle_and_claim(
    conn: &mut PgConnection,
    sql: &str,
    outcomes: &[Outcome],
    claim: &ClaimRequest,
) -> Result<Exchange> {
    let n = outcomes.len();
    let (mut ids, mut tokens, mut codes) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut results, mut delays, mut errors, mut counted) =
        (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    // In id order, as every settle takes its rows (see SETTLE_AND_CLAIM).
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.lease().id);
    for outcome in sorted {
        let lease = outcome.lease();
        ids.push(lease.id);
        tokens.push(lease.token);
        codes.push(outcome.code());
        errors.push(outcome.error());
        let (result, delay, count) = match outcome {
            Outcome::Completed { result, .. } => (result.as_deref(), None, true),
            Outcome::Rescheduled { delay, counted, .. } => (None, Some(duration_micros(*delay)), *counted),
            Outcome::Failed { .. } | Outcome::Released { .. } => (None, None, true),
        };
        results.push(result);
        delays.push(delay);
        counted.push(count);
    }
    let rows = sqlx::query(sql)
        .bind(&ids)
        .bind(&tokens)
        .bind(&codes)
        .bind(&results)
        .bind(&delays)
        .bind(&errors)
        .bind(&counted)
        .bind(&*claim.kinds)
        .bind(&*claim.owner)
        .bind(duration_micros(claim.lease))
        .fetch_all(&mut *conn)
        .await?;
    let mut exchange = Exchange::default();
    let mut settled = std::collections::HashSet::with_capacity(n);
    for row in rows {
        if row.try_get::<bool, _>("claimed")? {
            exchange.claimed.push(ClaimedTask {
                lease: Lease { id: row.try_get("id")?, token: row.try_get("lease_token")? },
                kind: row.try_get("kind")?,
                payload: row.try_get("payload")?,
                key: row.try_get("idempotency_key")?,
                attempt: row.try_get("attempt")?,
                max_attempts: row.try_get("max_attempts")?,
            });
        } else {
            settled.insert(Lease { id: row.try_get("id")?, token: row.try_get("lease_token")? });
        }
    }
    if settled.len() != n {
        let unsettled: Vec<Lease> =
            outcomes.iter().map(Outcome::lease).filter(|l| !settled.contains(l)).collect();
        let (ids, tokens) = split(&unsettled);
        let written: Vec<(i64, Uuid)> =
            sqlx::query_as(WRITTEN).bind(&ids).bind(&tokens).fetch_all(&mut *conn).await?;
        exchange.refused = unsettled.into_iter().filter(|l| !written.contains(&(l.id, l.token))).collect();
    }
    let released =
        outcomes.iter().any(|o| matches!(o, Outcome::Released { lease } if settled.contains(lease)));
    if released {
        sqlx::query("SELECT pg_notify($1, '')").bind(CHANNEL).execute(&mut *conn).await?;
    }
    Ok(exchange)
}

fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn task_info(row: &PgRow) -> Result<TaskInfo> {
    let state: String = row.try_get("state")?;
    let payload: String = row.try_get("payload")?;
    let errors: String = row.try_get("errors")?;
    let decode = |e: Box<dyn std::error::Error + Send + Sync>| sqlx::Error::Decode(e);
    Ok(TaskInfo {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        payload: serde_json::from_str(&payload).map_err(|e| decode(e.into()))?,
        key: row.try_get("idempotency_key")?,
        state: state.parse::<TaskState>().map_err(|e| decode(e.into()))?,
        attempt: count(row.try_get("attempt")?),
        max_attempts: count(row.try_get("max_attempts")?),
        run_at: from_micros(row.try_get("run_at")?),
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: row.try_get::<Option<i64>, _>("lease_expires_at")?.map(from_micros),
        last_error: row.try_get("last_error")?,
        errors: serde_json::from_str(&errors).map_err(|e| decode(e.into()))?,
        created_at: from_micros(row.try_get("created_at")?),
        updated_at: from_micros(row.try_get("updated_at")?),
        finalized_at: row.try_get::<Option<i64>, _>("finalized_at")?.map(from_micros),
        result: row
            .try_get::<Option<String>, _>("result")?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| decode(e.into()))?,
    })
}

impl PgStore {
    /// One settle-and-claim: in a transaction with the follow-ups when any
    /// outcome has some (a failure's alert tasks exist only if the failure
    /// was stored, by its own fenced write).
    async fn settle_and_claim_once(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        let sql = self.statements.settle_and_claim(claim.limit);
        if outcomes.iter().all(|o| o.follow_ups().is_empty()) {
            let mut conn = self.pool.acquire().await?;
            return settle_and_claim(&mut conn, &sql, outcomes, claim).await;
        }
        let mut tx = self.pool.begin().await?;
        let exchange = settle_and_claim(&mut tx, &sql, outcomes, claim).await?;
        // An outcome written before (a lost answer) enqueued its follow-ups then.
        for outcome in outcomes.iter().filter(|o| !exchange.refused.contains(&o.lease())) {
            for task in outcome.follow_ups() {
                enqueue_one(&mut tx, task).await?;
            }
        }
        tx.commit().await?;
        Ok(exchange)
    }
}

impl Store for PgStore {
    async fn migrate(&self) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await?;
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

    async fn is_migrated(&self) -> Result<bool> {
        let mut conn = self.pool.acquire().await?;
        // Resolved through search_path, as the queue's own statements are.
        let has_table: bool = sqlx::query_scalar("SELECT to_regclass('ballast_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
        if !has_table {
            return Ok(false);
        }
        let applied: i64 =
            sqlx::query_scalar("SELECT count(*) FROM ballast_migrations").fetch_one(&mut *conn).await?;
        Ok(applied >= MIGRATIONS.len() as i64)
    }

    async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
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
        let mut tries = 0;
        loop {
            match self.settle_and_claim_once(outcomes, claim).await {
                Err(crate::Error::Database(sqlx::Error::Database(e)))
                    if tries < RETRIES && e.code().is_some_and(|c| RETRIED_STATES.contains(&&*c)) =>
                {
                    tries += 1;
                    tracing::debug!(error = %e, "settle-and-claim aborted by PostgreSQL (deadlock or conflict); sent again");
                }
                other => return other,
            }
        }
    }

    async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        let (ids, tokens) = split(leases);
        let extended: Vec<(i64, Uuid)> = sqlx::query_as(
            "UPDATE ballast_tasks t
             SET lease_expires_at = now() + $3 * interval '1 microsecond', updated_at = now()
             FROM unnest($1::bigint[], $2::uuid[]) AS c(id, token)
             WHERE t.id = c.id AND t.lease_token = c.token AND t.state = 'running'
             RETURNING t.id, t.lease_token",
        )
        .bind(&ids)
        .bind(&tokens)
        .bind(duration_micros(lease))
        .fetch_all(&self.pool)
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
             FROM ballast_tasks WHERE kind = $1 AND state IN ('pending', 'running') GROUP BY value",
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
        let order = if filter.newest_first { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT {COLUMNS} FROM ballast_tasks
             WHERE ($1::text IS NULL OR kind = $1) AND ($2::text IS NULL OR state = $2) AND id > $3 AND id < $5
             ORDER BY id {order} LIMIT $4"
        );
        let rows = sqlx::query(&sql)
            .bind(filter.kind.as_deref())
            .bind(filter.state.map(TaskState::as_str))
            .bind(filter.after_id)
            .bind(i64::from(filter.limit))
            .bind(filter.before_id.unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(task_info).collect()
    }

    async fn get(&self, id: i64) -> Result<Option<TaskInfo>> {
        let sql = format!("SELECT {COLUMNS} FROM ballast_tasks WHERE id = $1");
        let row = sqlx::query(&sql).bind(id).fetch_optional(&self.pool).await?;
        row.as_ref().map(task_info).transpose()
    }

    async fn retry(&self, id: Option<i64>, kind: Option<&str>) -> Result<u64> {
        let done = sqlx::query(
            "UPDATE ballast_tasks
             SET state = 'pending', attempt = 0, run_at = now(), finalized_at = NULL, updated_at = now()
             WHERE state = 'failed' AND ($1::bigint IS NULL OR id = $1) AND ($2::text IS NULL OR kind = $2)",
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
        let done = sqlx::query(
            "UPDATE ballast_tasks SET run_at = now(), updated_at = now() WHERE id = $1 AND state = 'pending'",
        )
        .bind(id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() > 0 {
            notify(&self.pool).await?;
        }
        Ok(done.rows_affected() == 1)
    }

    async fn cancel(&self, id: i64) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE ballast_tasks
             SET state = 'cancelled', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
                 updated_at = now(), finalized_at = now()
             WHERE id = $1 AND state IN ('pending', 'running')",
        )
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
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
}

/// Wakes listening workers after an update made tasks due (inserts notify by trigger).
async fn notify(pool: &PgPool) -> Result<()> {
    sqlx::query("SELECT pg_notify($1, '')").bind(CHANNEL).execute(pool).await?;
    Ok(())
}
