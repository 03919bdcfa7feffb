-- Timestamps are integer microseconds since the Unix epoch (UTC), taken from
-- the clock of the process that writes them; see SCHEMA.md.
CREATE TABLE IF NOT EXISTS ballast_tasks (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    idempotency_key  TEXT,
    state            TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 10 CHECK (max_attempts >= 1),
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT,
    lease_token      BLOB,
    lease_expires_at INTEGER,
    last_error       TEXT,
    errors           TEXT    NOT NULL DEFAULT '[]',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finalized_at     INTEGER
);

CREATE UNIQUE INDEX IF NOT EXISTS ballast_tasks_kind_key
    ON ballast_tasks (kind, idempotency_key);

CREATE INDEX IF NOT EXISTS ballast_tasks_due
    ON ballast_tasks (run_at) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS ballast_tasks_lease
    ON ballast_tasks (lease_expires_at) WHERE state = 'running';

CREATE INDEX IF NOT EXISTS ballast_tasks_finalized
    ON ballast_tasks (finalized_at) WHERE finalized_at IS NOT NULL;
