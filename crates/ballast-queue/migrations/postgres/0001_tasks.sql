CREATE TABLE IF NOT EXISTS ballast_tasks (
    id               BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             TEXT        NOT NULL,
    payload          JSONB       NOT NULL,
    idempotency_key  TEXT,
    state            TEXT        NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
    attempt          INTEGER     NOT NULL DEFAULT 0,
    max_attempts     INTEGER     NOT NULL DEFAULT 10 CHECK (max_attempts >= 1),
    run_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_owner      TEXT,
    lease_token      UUID,
    lease_expires_at TIMESTAMPTZ,
    last_error       TEXT,
    errors           JSONB       NOT NULL DEFAULT '[]',
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    finalized_at     TIMESTAMPTZ
);

CREATE UNIQUE INDEX IF NOT EXISTS ballast_tasks_kind_key
    ON ballast_tasks (kind, idempotency_key);

CREATE INDEX IF NOT EXISTS ballast_tasks_due
    ON ballast_tasks (run_at) WHERE state = 'pending';

CREATE INDEX IF NOT EXISTS ballast_tasks_lease
    ON ballast_tasks (lease_expires_at) WHERE state = 'running';

CREATE INDEX IF NOT EXISTS ballast_tasks_finalized
    ON ballast_tasks (finalized_at) WHERE finalized_at IS NOT NULL;

-- Workers LISTEN on this channel so a new task is picked up at once instead
-- of at the next poll. Statement-level, so a batch insert sends one
-- notification, and it is delivered only when the enqueuing transaction commits.
CREATE OR REPLACE FUNCTION ballast_tasks_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ballast_tasks', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS ballast_tasks_notify ON ballast_tasks;
CREATE TRIGGER ballast_tasks_notify
    AFTER INSERT ON ballast_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION ballast_tasks_notify();
