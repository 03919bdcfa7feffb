//! The SQLite connection the queue writes through: enqueues, claims,
//! outcomes and lease renewals, on one rusqlite connection driven from a
//! thread of its own, one message (one transaction) per batch.
//!
//! sqlx runs every SQLite statement on a worker thread behind a channel and
//! sends every row back through it, so a batch of 50 claimed tasks costs
//! dozens of thread hand-offs; here a batch costs two: the message and its
//! answer. SQLite takes one writer at a time anyway, so one connection per
//! process loses nothing, and its page cache stays warm (a pooled connection
//! finds it stale whenever another one wrote last). The pool keeps the
//! admin API's reads and the caller's own transactions
//! ([`Queue::enqueue_in`](crate::Queue::enqueue_in)).
//!
//! The connection is opened on first use, on the pool's file with the
//! pool's `synchronous` and busy timeout, so it is as durable and as patient
//! as the pool's connections. Every statement is prepared once and cached.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use sqlx::sqlite::SqlitePool;
use tokio::sync::{oneshot, OnceCell};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::store::{ClaimRequest, ClaimedTask, Exchange, Lease, ValidTask};
use crate::types::{duration_micros, micros, EnqueueOutcome};

/// Statements kept prepared on the connection (every one the engine runs).
const CACHED_STATEMENTS: usize = 32;

/// Appends `?err` at time `?now` to the error history, keeping the last 10.
macro_rules! push_error {
    ($now:literal, $err:literal) => {
        concat!(
            "errors = json_insert(CASE WHEN json_array_length(errors) >= 10 THEN json_remove(errors, '$[0]') ELSE errors END, ",
            "'$[#]', json_object('attempt', attempt, 'at', ",
            $now,
            ", 'error', ",
            $err,
            "))"
        )
    };
}

/// Fenced: each changes the row only while it is `running` under `?2`. The
/// token stays on the row after it is settled (a new claim replaces it), so
/// an outcome written in a transaction whose answer was lost is known for
/// this worker's own when the worker writes it again ([`WRITTEN`]).
/// Completes a task; its sequence comes back, for the task held behind it.
const COMPLETE: &str = "UPDATE ballast_tasks
    SET state = 'completed', result = coalesce(?3, result), lease_owner = NULL,
        lease_expires_at = NULL, updated_at = ?4, finalized_at = ?4
    WHERE id = ?1 AND lease_token = ?2 AND state = 'running'
    RETURNING sequence";

const RESCHEDULE: &str = concat!(
    "UPDATE ballast_tasks
    SET state = 'pending', run_at = ?4 + ?5, lease_owner = NULL,
        lease_expires_at = NULL, last_error = ?3, updated_at = ?4,
        attempt = attempt - CASE WHEN ?6 THEN 0 ELSE 1 END, payload = coalesce(?7, payload), ",
    push_error!("?4", "?3"),
    " WHERE id = ?1 AND lease_token = ?2 AND state = 'running'"
);

const FAIL: &str = concat!(
    "UPDATE ballast_tasks
    SET state = 'failed', lease_owner = NULL, lease_expires_at = NULL,
        last_error = ?3, updated_at = ?4, finalized_at = ?4, ",
    push_error!("?4", "?3"),
    " WHERE id = ?1 AND lease_token = ?2 AND state = 'running'"
);

const RELEASE: &str = "UPDATE ballast_tasks
    SET state = 'pending', run_at = ?3, attempt = max(attempt - 1, 0), lease_owner = NULL,
        lease_expires_at = NULL, updated_at = ?3
    WHERE id = ?1 AND lease_token = ?2 AND state = 'running'";

/// Whether the attempt of `?2` already settled the task: its own outcome,
/// written by a round trip whose answer never came back.
const WRITTEN: &str = "SELECT 1 FROM ballast_tasks WHERE id = ?1 AND lease_token = ?2 AND state <> 'running'";

const PROBE: &str = "INSERT INTO ballast_probe (id, probes) VALUES (1, 1)
    ON CONFLICT (id) DO UPDATE SET probes = probes + 1";

const RENEW: &str = "UPDATE ballast_tasks SET lease_expires_at = ?3, updated_at = ?4
    WHERE id = ?1 AND lease_token = ?2 AND state = 'running'";

/// Due pending tasks and running ones whose lease expired, oldest due first,
/// along the live index; `?6` holds ids settled in the same transaction.
///
/// SQLite keeps the claim that finds expired leases on its own walk, so a
/// round trip's sweep ([`ClaimRequest::sweep`]) has nothing to add here:
/// one writer's running tasks are at most its concurrency, and a pending-only
/// index (PostgreSQL's since migration 6) cost SQLite an index write more
/// per task, 11 % of its drain rate (`queue_bench --backend sqlite --defaults`,
/// five interleaved rounds).
const CLAIM: &str = "UPDATE ballast_tasks
    SET state = 'running', attempt = attempt + 1, lease_owner = ?1,
        lease_token = randomblob(16), lease_expires_at = ?2, updated_at = ?3
    WHERE id IN (
        SELECT id FROM ballast_tasks INDEXED BY ballast_tasks_live
        WHERE finalized_at IS NULL AND run_at <= ?3
          AND (state = 'pending' OR lease_expires_at <= ?3)
          AND (kind IN (SELECT value FROM json_each(?4))
               OR (instr(kind, '/') > 0
                   AND substr(kind, 1, instr(kind, '/') - 1) IN (SELECT value FROM json_each(?7))))
          AND id NOT IN (SELECT value FROM json_each(?6))
        ORDER BY run_at LIMIT ?5)
    RETURNING id, kind, payload, idempotency_key, attempt, max_attempts, lease_token, sequence";

const INSERT: &str = super::INSERT;

const BY_KEY: &str = "SELECT id FROM ballast_tasks WHERE kind = ?1 AND idempotency_key = ?2";

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The handle of the connection's thread; clones share it. The thread ends
/// when the last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    pool: SqlitePool,
    /// Opens the file read-only, as the pool of a read-only queue does.
    read_only: bool,
    jobs: Arc<OnceCell<mpsc::Sender<Job>>>,
}

fn now() -> i64 {
    micros(SystemTime::now())
}

impl Engine {
    /// An engine on the file of `pool`; nothing is opened until it is used.
    pub fn new(pool: SqlitePool, read_only: bool) -> Self {
        Self { pool, read_only, jobs: Arc::default() }
    }

    /// Runs `f` in a transaction of its own on the engine's thread (`BEGIN
    /// IMMEDIATE`: the write lock first, so a busy database makes it wait
    /// in the busy handler rather than fail on a lock upgrade).
    async fn transaction<R: Send + 'static>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<R> + Send + 'static,
    ) -> Result<R> {
        let jobs = self.jobs.get_or_try_init(|| self.open()).await?;
        let (answer, answered) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let result = conn.transaction_with_behavior(TransactionBehavior::Immediate).and_then(|tx| {
                let value = f(&tx)?;
                tx.commit()?;
                Ok(value)
            });
            // The caller may have stopped waiting; the transaction stands either way.
            let _ = answer.send(result);
        });
        jobs.send(job).map_err(|_| closed())?;
        answered.await.map_err(|_| closed())?.map_err(database)
    }

    /// Starts the thread and opens its connection like the pool's.
    async fn open(&self) -> Result<mpsc::Sender<Job>> {
        let mut conn = self.pool.acquire().await?;
        let (file,): (String,) = sqlx::query_as("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .fetch_one(&mut *conn)
            .await?;
        let (synchronous,): (i64,) = sqlx::query_as("PRAGMA synchronous").fetch_one(&mut *conn).await?;
        let (busy_ms,): (i64,) = sqlx::query_as("PRAGMA busy_timeout").fetch_one(&mut *conn).await?;
        drop(conn);
        if file.is_empty() {
            return Err(Error::InMemorySqlite);
        }
        let access =
            if self.read_only { OpenFlags::SQLITE_OPEN_READ_ONLY } else { OpenFlags::SQLITE_OPEN_READ_WRITE };
        let (opened, ready) = oneshot::channel();
        let (jobs, inbox) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("ballast-sqlite".into())
            .spawn(move || {
                let conn = Connection::open_with_flags(&file, access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                    .and_then(|conn| {
                        conn.busy_timeout(Duration::from_millis(u64::try_from(busy_ms).unwrap_or(0)))?;
                        conn.pragma_update(None, "synchronous", synchronous)?;
                        conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
                        Ok(conn)
                    });
                let mut conn = match conn {
                    Ok(conn) => {
                        let _ = opened.send(Ok(()));
                        conn
                    }
                    Err(e) => {
                        let _ = opened.send(Err(e));
                        return;
                    }
                };
                // Ends when every handle, and so every sender, is gone.
                for job in inbox {
                    job(&mut conn);
                }
            })
            .map_err(|e| Error::Database(sqlx::Error::Io(e)))?;
        ready.await.map_err(|_| closed())?.map_err(database)?;
        Ok(jobs)
    }

    /// Inserts `tasks` in one transaction; a task whose kind and key exist
    /// already gets the existing task's id.
    pub async fn enqueue(&self, tasks: Vec<ValidTask>) -> Result<Vec<EnqueueOutcome>> {
        self.transaction(move |tx| {
            let now = now();
            tasks.iter().map(|task| insert(tx, task, now)).collect()
        })
        .await
    }

    /// Writes `outcomes` and claims the next batch, in one transaction.
    pub async fn settle_and_claim(&self, outcomes: &[Outcome], claim: &ClaimRequest) -> Result<Exchange> {
        // The closure runs on the engine's thread: it takes what it needs.
        let outcomes = outcomes.to_vec();
        let claim = claim.clone();
        self.transaction(move |tx| {
            let now = now();
            let mut exchange = Exchange::default();
            let mut settled_due = Vec::new();
            let mut sequences = Vec::new();
            for outcome in &outcomes {
                let Some(sequence) = apply(tx, outcome, now)? else {
                    if !written(tx, outcome.lease())? {
                        exchange.refused.push(outcome.lease());
                    }
                    // Written before, follow-ups and all: nothing to add.
                    continue;
                };
                sequences.extend(sequence);
                for task in outcome.follow_ups() {
                    insert(tx, task, now)?;
                }
                if due_now(outcome) {
                    settled_due.push(outcome.lease().id);
                }
            }
            if !sequences.is_empty() {
                let sequences = serde_json::to_string(&sequences).unwrap_or_default();
                let released = tx.prepare_cached(super::RELEASE_HELD)?.execute(params![now, sequences])?;
                exchange.released = released as u64;
            }
            if claim.limit > 0 {
                exchange.claimed = claim_due(tx, &claim, now, &settled_due)?;
            }
            Ok(exchange)
        })
        .await
    }

    /// The monitor's write (see `0004_probe.sql`): a disk that refuses it
    /// fails it.
    pub async fn probe(&self) -> Result<()> {
        self.transaction(|tx| {
            tx.prepare_cached(PROBE)?.execute([])?;
            Ok(())
        })
        .await
    }

    /// Extends the leases still held; returns those extended.
    pub async fn heartbeat(&self, leases: &[Lease], lease: Duration) -> Result<Vec<Lease>> {
        let leases = leases.to_vec();
        self.transaction(move |tx| {
            let now = now();
            let expires = now.saturating_add(duration_micros(lease));
            let mut renew = tx.prepare_cached(RENEW)?;
            let mut extended = Vec::with_capacity(leases.len());
            for held in leases {
                if renew.execute(params![held.id, held.token.as_bytes(), expires, now])? == 1 {
                    extended.push(held);
                }
            }
            Ok(extended)
        })
        .await
    }
}

fn closed() -> Error {
    Error::Database(sqlx::Error::WorkerCrashed)
}

/// A failed statement of the engine's connection, reported as sqlx reports
/// SQLite's own errors: one kind of database error for the whole queue.
fn database(error: rusqlite::Error) -> Error {
    let code = match &error {
        rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code),
        _ => None,
    };
    Error::Database(sqlx::Error::Database(Box::new(EngineError { message: error.to_string(), code, error })))
}

#[derive(Debug)]
struct EngineError {
    message: String,
    /// SQLite's extended result code.
    code: Option<i32>,
    error: rusqlite::Error,
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl sqlx::error::DatabaseError for EngineError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.code.map(|code| code.to_string().into())
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        use rusqlite::ffi;
        match self.code {
            Some(ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY) => {
                sqlx::error::ErrorKind::UniqueViolation
            }
            Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY) => sqlx::error::ErrorKind::ForeignKeyViolation,
            Some(ffi::SQLITE_CONSTRAINT_NOTNULL) => sqlx::error::ErrorKind::NotNullViolation,
            Some(ffi::SQLITE_CONSTRAINT_CHECK) => sqlx::error::ErrorKind::CheckViolation,
            _ => sqlx::error::ErrorKind::Other,
        }
    }
}

/// Inserts `task` unless its kind and key exist; either way its id.
fn insert(tx: &rusqlite::Transaction<'_>, task: &ValidTask, now: i64) -> rusqlite::Result<EnqueueOutcome> {
    let inserted: Option<i64> = tx
        .prepare_cached(INSERT)?
        .query_row(
            params![
                task.kind,
                task.payload,
                task.key,
                task.max_attempts,
                task.run_at.unwrap_or(now),
                now,
                task.sequence
            ],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(id) = inserted {
        return Ok(EnqueueOutcome { id, created: true });
    }
    let id = tx.prepare_cached(BY_KEY)?.query_row(params![task.kind, task.key], |row| row.get(0))?;
    Ok(EnqueueOutcome { id, created: false })
}

/// Writes `outcome` if its lease still holds: `None` if it did not; else
/// the sequence of a task it completed.
fn apply(
    tx: &rusqlite::Transaction<'_>,
    outcome: &Outcome,
    now: i64,
) -> rusqlite::Result<Option<Option<String>>> {
    let lease = outcome.lease();
    let (id, token) = (lease.id, lease.token.as_bytes());
    let changed = match outcome {
        Outcome::Completed { result, .. } => {
            let mut complete = tx.prepare_cached(COMPLETE)?;
            return complete.query_row(params![id, token, result, now], |row| row.get(0)).optional();
        }
        Outcome::Rescheduled { delay, error, counted, payload, .. } => tx
            .prepare_cached(RESCHEDULE)?
            .execute(params![id, token, error, now, duration_micros(*delay), counted, payload])?,
        Outcome::Failed { error, .. } => tx.prepare_cached(FAIL)?.execute(params![id, token, error, now])?,
        Outcome::Released { .. } => tx.prepare_cached(RELEASE)?.execute(params![id, token, now])?,
    };
    Ok((changed == 1).then_some(None))
}

/// Whether `lease`'s own outcome is already written (see [`WRITTEN`]).
fn written(tx: &rusqlite::Transaction<'_>, lease: Lease) -> rusqlite::Result<bool> {
    tx.prepare_cached(WRITTEN)?.exists(params![lease.id, lease.token.as_bytes()])
}

/// Whether `outcome` leaves its task pending and due at once.
fn due_now(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Rescheduled { delay, .. } => delay.is_zero(),
        Outcome::Released { .. } => true,
        Outcome::Completed { .. } | Outcome::Failed { .. } => false,
    }
}

/// Claims up to `claim.limit` due tasks, none of `exclude`.
fn claim_due(
    tx: &rusqlite::Transaction<'_>,
    claim: &ClaimRequest,
    now: i64,
    exclude: &[i64],
) -> rusqlite::Result<Vec<ClaimedTask>> {
    let json = |names: &[String]| {
        serde_json::to_string(names).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))
    };
    let (kinds, families) = (json(&claim.kinds)?, json(&claim.families)?);
    let exclude =
        serde_json::to_string(exclude).map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    let expires = now.saturating_add(duration_micros(claim.lease));
    let limit = i64::try_from(claim.limit).unwrap_or(i64::MAX);
    let mut statement = tx.prepare_cached(CLAIM)?;
    let rows = statement.query_map(
        params![&*claim.owner, expires, now, kinds, limit, exclude, families],
        |row| {
            Ok(ClaimedTask {
                lease: Lease { id: row.get(0)?, token: Uuid::from_bytes(row.get::<_, [u8; 16]>(6)?) },
                kind: row.get(1)?,
                payload: row.get(2)?,
                key: row.get(3)?,
                attempt: row.get(4)?,
                max_attempts: row.get(5)?,
                sequence: row.get(7)?,
            })
        },
    )?;
    rows.collect()
}
