//! The SQL of the PostgreSQL store: its migrations, the one settle-and-claim
//! statement (prepared once per claim limit), enqueue in a batch, the probe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::reads::ReadSql;

pub(super) const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../../migrations/postgres/0001_tasks.sql")),
    (2, include_str!("../../../migrations/postgres/0002_live_index.sql")),
    (3, include_str!("../../../migrations/postgres/0003_task_result.sql")),
    (4, include_str!("../../../migrations/postgres/0004_probe.sql")),
    (5, include_str!("../../../migrations/postgres/0005_sequence.sql")),
    (6, include_str!("../../../migrations/postgres/0006_pending_claim.sql")),
    (7, include_str!("../../../migrations/postgres/0007_bound_keys.sql")),
];

/// Serializes concurrent `migrate()` calls across processes.
pub(super) const MIGRATION_LOCK: i64 = 0x6261_6c6c_6173_7401;

/// The channel the insert trigger notifies.
pub(super) const CHANNEL: &str = "ballast_tasks";

/// The task columns the admin API reads: times as microseconds since the
/// Unix epoch, JSON as text, as the SQLite backend stores them.
macro_rules! columns {
    () => {
        "id, kind, payload::text AS payload, idempotency_key, state, attempt, max_attempts, \
         (extract(epoch FROM run_at) * 1000000)::bigint AS run_at, lease_owner, \
         (extract(epoch FROM lease_expires_at) * 1000000)::bigint AS lease_expires_at, last_error, \
         errors::text AS errors, (extract(epoch FROM created_at) * 1000000)::bigint AS created_at, \
         (extract(epoch FROM updated_at) * 1000000)::bigint AS updated_at, \
         (extract(epoch FROM finalized_at) * 1000000)::bigint AS finalized_at, result::text AS result, sequence"
    };
}

/// The admin API's reads ([`ReadSql`] says each one's binds).
pub(super) const READS: ReadSql = ReadSql {
    list: concat!(
        "SELECT ",
        columns!(),
        " FROM ballast_tasks
         WHERE ($1::text IS NULL OR kind = $1 OR left(kind, length($1) + 1) = $1 || '/')
           AND ($2::text IS NULL OR state = $2) AND id > $3 AND id < $5
         ORDER BY id {order} LIMIT $4"
    ),
    get: concat!("SELECT ", columns!(), " FROM ballast_tasks WHERE id = $1"),
    get_by_key: concat!(
        "SELECT ",
        columns!(),
        " FROM ballast_tasks WHERE kind = $1 AND idempotency_key = $2"
    ),
};

/// The due time of a task held behind its sequence (see `0005_sequence.sql`).
macro_rules! held {
    () => {
        "timestamptz '9999-01-01 00:00:00+00'"
    };
}

/// Serializes the enqueues and releases of one sequence (its name, `$1`),
/// so a task enqueued while the one before it settles is either held and
/// then released, or sees it settled.
pub(super) const LOCK_SEQUENCE: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('ballast.sequence:' || s, 0))
    FROM unnest($1::text[]) AS s ORDER BY s";

/// Inserts one task; held when an earlier one of its sequence (`$6`) holds it.
pub(super) const INSERT: &str = concat!(
    "INSERT INTO ballast_tasks (kind, payload, idempotency_key, max_attempts, run_at, sequence)
     VALUES ($1, $2::jsonb, $3, $4,
             CASE WHEN $6::text IS NOT NULL AND EXISTS (
                      SELECT 1 FROM ballast_tasks
                      WHERE sequence = $6 AND state IN ('pending', 'running', 'failed'))
                  THEN ",
    held!(),
    " ELSE COALESCE(timestamptz 'epoch' + $5 * interval '1 microsecond', now()) END,
             $6)
     ON CONFLICT (kind, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
     RETURNING id"
);

/// Makes due the first task of each sequence of `$1` (all sequences with a
/// held task when `$1` is NULL) if it is held, under the sequences' locks,
/// and wakes the workers if it did: `ballast_release_held` of
/// `0005_sequence.sql`, one round trip.
pub(super) const RELEASE_HELD: &str = "SELECT ballast_release_held($1::text[])";

/// Makes pending task `$1` due now, unless it waits held behind its sequence.
pub(super) const RUN_NOW: &str = concat!(
    "UPDATE ballast_tasks SET run_at = now(), updated_at = now()
     WHERE id = $1 AND state = 'pending' AND run_at < ",
    held!()
);

/// The first task that holds sequence `$1`.
pub(super) const SEQUENCE_HEAD: &str = "SELECT min(id) FROM ballast_tasks
    WHERE sequence = $1 AND state IN ('pending', 'running', 'failed')";

/// Takes failed task `$1` out of its sequence; the sequence it left.
pub(super) const LEAVE_SEQUENCE: &str = "UPDATE ballast_tasks t SET sequence = NULL, updated_at = now()
    FROM (SELECT id, sequence FROM ballast_tasks WHERE id = $1) old
    WHERE t.id = old.id AND t.state = 'failed' AND t.sequence IS NOT NULL
    RETURNING old.sequence";

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
/// The claim walks the index of pending tasks alone, in `run_at` order: it
/// never steps over a running task. Running tasks whose lease expired are
/// returned to pending by the sweep ([`SWEEP`], every so often), along the index
/// of running tasks by lease expiry, their tokens dropped so the workers that
/// lost them can neither write an outcome nor take the row for one they
/// settled ([`WRITTEN`]); the attempt stays counted (its worker may have
/// reached the system). Rows settled or swept here are not seen as pending by
/// the claim (the statement's snapshot is taken before they change), so a
/// swept task is claimed from the next round trip, and a settled one is
/// never re-claimed in its own. A completed task's sequence comes back
/// with its lease: the task held behind it is released next
/// ([`RELEASE_HELD`]).
///
/// The claim's `LIMIT` is written into the text (`{limit}`, see
/// [`Statements`]) and the claimed rows are found by `id = ANY(ARRAY(…))`,
/// an index lookup however many there are: every part keeps its plan
/// whatever the parameters are, so PostgreSQL soon runs the prepared
/// statement on its generic plan instead of planning it anew for each batch.
/// With the limit a parameter, the generic plan guesses a tenth of the table
/// and is never chosen, and planning each batch cost a fifth of the
/// statement's CPU.
pub(super) const SETTLE_AND_CLAIM: &str = "
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::bool[],
                         $11::text[])
        AS i(id, token, outcome, result, delay, error, counted, payload)
),
settled AS (
    UPDATE ballast_tasks t
    SET state = CASE i.outcome WHEN 'c' THEN 'completed' WHEN 'f' THEN 'failed' ELSE 'pending' END,
        result = CASE WHEN i.outcome = 'c' THEN coalesce(i.result::jsonb, t.result) ELSE t.result END,
        payload = CASE WHEN i.outcome = 'r' THEN coalesce(i.payload::jsonb, t.payload) ELSE t.payload END,
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
    RETURNING t.id, i.token, CASE WHEN i.outcome = 'c' THEN t.sequence END AS sequence
),
{sweep}picked AS (
    SELECT id FROM ballast_tasks
    WHERE state = 'pending' AND run_at <= now() AND (kind = ANY($8) OR split_part(kind, '/', 1) = ANY($12))
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
              t.max_attempts, t.lease_token, t.sequence
)
SELECT true AS claimed, id, kind, payload, idempotency_key, attempt, max_attempts, lease_token, sequence
FROM claimed
UNION ALL
SELECT false, id, NULL, NULL, NULL, NULL, NULL, token, sequence FROM settled";

/// The sweep's part of [`SETTLE_AND_CLAIM`], in the text only of the
/// statement a sweeping round trip sends: a parameter that switched it off
/// would make PostgreSQL plan the common statement anew for every batch (a
/// custom plan without the sweep always looks cheaper than the generic one).
const SWEEP: &str = "rescued AS (
    UPDATE ballast_tasks t
    SET state = 'pending', lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = now()
    WHERE t.id = ANY(ARRAY(
            SELECT id FROM ballast_tasks
            WHERE state = 'running' AND lease_expires_at <= now() AND id <> ALL($1)
            ORDER BY lease_expires_at
            LIMIT 1000
            FOR UPDATE SKIP LOCKED))
    RETURNING t.id
),
";

/// Of the leases given, those whose own outcome is already written: the
/// task is no longer running and still carries the attempt's token.
pub(super) const WRITTEN: &str = "
SELECT t.id, t.lease_token FROM ballast_tasks t
JOIN unnest($1::bigint[], $2::uuid[]) AS c(id, token) ON t.id = c.id AND t.lease_token = c.token
WHERE t.state <> 'running'";

/// The monitor's write (see `0004_probe.sql`).
pub(super) const PROBE: &str = "INSERT INTO ballast_probe (id, probes) VALUES (1, 1)
    ON CONFLICT (id) DO UPDATE SET probes = ballast_probe.probes + 1";

/// Renews the leases of `$1` (ids) held with `$2` (tokens) for `$3` µs,
/// taking the rows in id order as a settle does (C2): a renewal and a
/// settle of the same tasks never wait on each other in a circle.
pub(super) const HEARTBEAT: &str = "
WITH held AS (
    SELECT t.id FROM ballast_tasks t
    JOIN unnest($1::bigint[], $2::uuid[]) AS c(id, token) ON t.id = c.id AND t.lease_token = c.token
    WHERE t.state = 'running'
    ORDER BY t.id
    FOR UPDATE OF t
)
UPDATE ballast_tasks t
SET lease_expires_at = now() + $3 * interval '1 microsecond', updated_at = now()
FROM held
WHERE t.id = held.id
RETURNING t.id, t.lease_token";

/// SQLSTATEs of a transaction PostgreSQL aborted to break a deadlock or a
/// serialization conflict: retried at once, not reported.
pub(super) const RETRIED_STATES: [&str; 2] = ["40P01", "40001"];

/// How many times a settle-and-claim PostgreSQL aborted is sent again
/// before the error is the worker's to report.
pub(super) const RETRIES: usize = 3;

/// Inserts a whole batch in one statement. Each task gets its id from the
/// identity sequence up front, so every input row is reported, in order, with
/// whether it was inserted or refused by `ON CONFLICT` (an existing task with
/// the same kind and key, or an earlier one in the same batch).
pub(super) const ENQUEUE_BATCH: &str = "
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

/// [`SETTLE_AND_CLAIM`]'s text for each claim limit asked for so far, with
/// and without the sweep: one prepared statement per limit and connection
/// (sqlx keeps them), at most twice as many as a worker's batch size.
#[derive(Debug, Clone, Default)]
pub(super) struct Statements(Arc<Mutex<HashMap<Variant, Arc<str>>>>);

/// A claim limit, and whether the round trip sweeps.
type Variant = (usize, bool);

impl Statements {
    pub(super) fn settle_and_claim(&self, limit: usize, sweep: bool) -> Arc<str> {
        let mut texts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let text = texts.entry((limit, sweep)).or_insert_with(|| {
            let text = SETTLE_AND_CLAIM.replace("{limit}", &limit.to_string());
            text.replace("{sweep}", if sweep { SWEEP } else { "" }).into()
        });
        Arc::clone(text)
    }
}
