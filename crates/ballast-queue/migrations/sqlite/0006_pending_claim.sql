-- Version 6 is PostgreSQL's: its claim walks an index of pending tasks
-- alone, and a sweep returns expired leases to pending. SQLite keeps version
-- 5's live index, whose walk finds expired leases itself: one writer's
-- running tasks are at most its concurrency, and a pending-only index cost
-- SQLite one index write more per task. The version is recorded all the
-- same, so both backends count the same migrations.
SELECT 1;
