-- Version 2: claiming a task touches no index, completing it only the two
-- partial indexes on finalized_at.
--
-- Claiming changes only columns no index covers (state, attempt, lease_*,
-- updated_at). One index on the due time of every unfinished task serves both
-- kinds of claim, due pending tasks and running ones whose lease expired.
-- Tasks without an idempotency key have no entry in the key index.

DROP INDEX IF EXISTS ballast_tasks_due;
DROP INDEX IF EXISTS ballast_tasks_lease;

CREATE INDEX IF NOT EXISTS ballast_tasks_live
    ON ballast_tasks (run_at) WHERE finalized_at IS NULL;

DROP INDEX IF EXISTS ballast_tasks_kind_key;
CREATE UNIQUE INDEX ballast_tasks_kind_key
    ON ballast_tasks (kind, idempotency_key) WHERE idempotency_key IS NOT NULL;
