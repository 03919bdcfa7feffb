-- Version 2: the queue schema each replica speaks, so `ballast queue
-- migrate --check` can tell whether the running fleet can take a
-- migration. Nullable: replicas of version 1 leave it empty.
ALTER TABLE ballast_fleet_replicas ADD COLUMN IF NOT EXISTS queue_schema BIGINT;
