-- Version 6: a claim walks only what it takes. The claim's index holds
-- pending tasks alone, by due time, so a claim never steps over running
-- tasks; a running task whose lease expired is returned to pending by a
-- sweep of its own (`RESCUE` in the store), along an index of running tasks
-- by lease expiry.

CREATE INDEX IF NOT EXISTS ballast_tasks_pending
    ON ballast_tasks (run_at) WHERE state = 'pending';

-- `lease_expires_at IS NOT NULL` in its predicate keeps the planner from
-- taking it for the statements that look up running tasks by id (a settle,
-- a renewal): `state = 'running'` alone would match them, and a walk of every
-- running task joined to a batch's ids costs far more than the primary key.
CREATE INDEX IF NOT EXISTS ballast_tasks_running
    ON ballast_tasks (lease_expires_at) WHERE state = 'running' AND lease_expires_at IS NOT NULL;

DROP INDEX IF EXISTS ballast_tasks_live;
