-- One row a monitor writes to on every check (QueueMonitorBuilder::storage):
-- a queue whose disk refuses writes is unready before a task is lost to it.
CREATE TABLE IF NOT EXISTS ballast_probe (
    id     INTEGER PRIMARY KEY,
    probes BIGINT  NOT NULL
);
