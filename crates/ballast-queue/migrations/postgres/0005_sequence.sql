-- Version 5: sequences. A task may name the entity its write changes
-- (`sequence`, e.g. `customer/42`); a sequence's tasks run one at a time, in
-- the order they were enqueued. A task enqueued behind an unfinished one of
-- its sequence (pending, running, or failed and not released) waits held:
-- due at 9999-01-01, a time no claim reaches, so claims never walk it; it is
-- made due when the task before it completes, is cancelled or released.
ALTER TABLE ballast_tasks ADD COLUMN IF NOT EXISTS sequence TEXT;

-- Only the tasks that hold their sequences: finding a sequence's head (on
-- every enqueue and completion in it) never walks its finished tasks.
CREATE INDEX IF NOT EXISTS ballast_tasks_sequence
    ON ballast_tasks (sequence, id)
    WHERE sequence IS NOT NULL AND state IN ('pending', 'running', 'failed');

-- Makes due the first task of each sequence of `sequences` (every sequence
-- with a held task when NULL) if it is held: nothing before it holds it any
-- more. Under each sequence's lock, so that a task enqueued meanwhile is
-- either seen here or sees the one before it finished; each statement reads
-- a fresh snapshot, the lock's holder's writes included. One round trip
-- for a worker's settle; wakes the workers when it released any.
CREATE OR REPLACE FUNCTION ballast_release_held(sequences text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    released bigint;
BEGIN
    IF sequences IS NULL THEN
        sequences := ARRAY(SELECT DISTINCT sequence FROM ballast_tasks
                           WHERE finalized_at IS NULL AND run_at >= timestamptz '9999-01-01 00:00:00+00'
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
