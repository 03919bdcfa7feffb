-- Version 5: sequences. A task may name the entity its write changes
-- (`sequence`, e.g. `customer/42`); a sequence's tasks run one at a time, in
-- the order they were enqueued. A task enqueued behind an unfinished one of
-- its sequence (pending, running, or failed and not released) waits held:
-- due at 9999-01-01, a time no claim reaches, so claims never walk it; it is
-- made due when the task before it completes, is cancelled or released.
ALTER TABLE ballast_tasks ADD COLUMN sequence TEXT;

-- Only the tasks that hold their sequences: finding a sequence's head (on
-- every enqueue and completion in it) never walks its finished tasks.
CREATE INDEX IF NOT EXISTS ballast_tasks_sequence
    ON ballast_tasks (sequence, id)
    WHERE sequence IS NOT NULL AND state IN ('pending', 'running', 'failed');
