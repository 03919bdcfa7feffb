-- Version 2: claiming and completing write as few index entries as possible.
--
-- Claiming a task changes only columns no index covers (state, attempt,
-- lease_*, updated_at), so with room on the page the new row version is a
-- heap-only tuple (HOT): no index entry at all. One index on the due time of
-- every unfinished task serves both kinds of claim, due pending tasks and
-- running ones whose lease expired, and a task leaves it when it is finalized.
-- Tasks without an idempotency key have no entry in the key index.

DROP INDEX IF EXISTS ballast_tasks_due;
DROP INDEX IF EXISTS ballast_tasks_lease;

CREATE INDEX IF NOT EXISTS ballast_tasks_live
    ON ballast_tasks (run_at) WHERE finalized_at IS NULL;

DROP INDEX IF EXISTS ballast_tasks_kind_key;
CREATE UNIQUE INDEX ballast_tasks_kind_key
    ON ballast_tasks (kind, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Half of each page is left free when rows are inserted, so that the claim's
-- row version fits beside the one it replaces (a HOT update needs the same page).
ALTER TABLE ballast_tasks SET (fillfactor = 50);
