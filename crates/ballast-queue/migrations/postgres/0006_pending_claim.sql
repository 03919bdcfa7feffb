-- Version 6: a claim walks only what it takes. The claim's index holds
-- pending tasks alone, by due time: a claim no longer steps over the running
-- tasks (which stayed in the index of every unfinished task so that an
-- expired lease was found by the same walk) nor over entries of tasks
-- finished since the last vacuum. A running task whose lease expired is
-- returned to pending by a sweep of its own (`RESCUE` in the store), along
-- an index of running tasks by lease expiry.

CREATE INDEX IF NOT EXISTS ballast_tasks_pending
    ON ballast_tasks (run_at) WHERE state = 'pending';

-- `lease_expires_at IS NOT NULL` in its predicate keeps the planner from
-- taking it for the statements that look up running tasks by id (a settle,
-- a renewal): `state = 'running'` alone would match them, and a walk of every
-- running task joined to a batch's ids costs far more than the primary key.
CREATE INDEX IF NOT EXISTS ballast_tasks_running
    ON ballast_tasks (lease_expires_at) WHERE state = 'running' AND lease_expires_at IS NOT NULL;

DROP INDEX IF EXISTS ballast_tasks_live;

-- The held tasks of every sequence are found along the pending index now.
CREATE OR REPLACE FUNCTION ballast_release_held(sequences text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    released bigint;
BEGIN
    IF sequences IS NULL THEN
        sequences := ARRAY(SELECT DISTINCT sequence FROM ballast_tasks
                           WHERE state = 'pending' AND run_at >= timestamptz '9999-01-01 00:00:00+00'
                             AND sequence IS NOT NULL);
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('ballast.sequence:' || s, 0))
        FROM (SELECT DISTINCT s FROM unnest(sequences) AS s) AS each_sequence ORDER BY s;
    UPDATE ballast_tasks t SET run_at = now(), updated_at = now()
    FROM (SELECT DISTINCT s FROM unnest(sequences) AS s) AS q
    CROSS JOIN LATERAL (
        SELECT h.id FROM ballast_tasks h
        WHERE h.sequence = q.s AND h.state IN ('pending', 'running', 'failed')
        ORDER BY h.id LIMIT 1) AS head
    WHERE t.id = head.id AND t.state = 'pending' AND t.run_at >= timestamptz '9999-01-01 00:00:00+00';
    GET DIAGNOSTICS released = ROW_COUNT;
    IF released > 0 THEN
        PERFORM pg_notify('ballast_tasks', '');
    END IF;
    RETURN released;
END $$;
