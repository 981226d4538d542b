-- depends: 0004.messages_by_author
-- D16 retention: a file past its policy's max_age is retired (gone to its readers, its objects kept, nothing
-- redacted yet); past the grace it goes through mark_deleted. retired_at is the time of the retirement.
ALTER TABLE files ADD COLUMN retired_at timestamptz;
ALTER TABLE files ADD CONSTRAINT files_retired_live CHECK (retired_at IS NULL OR retired_at >= created_at);

-- Retire candidates of a policy: settled, live, not retired, by (purpose, last_change_at, id).
CREATE INDEX files_retention_candidates ON files (purpose, last_change_at, id)
    WHERE deleted_at IS NULL AND retired_at IS NULL AND upload_state <> 'uploading';

-- Retired files whose grace may be over, by (purpose, retired_at, id).
CREATE INDEX files_retired ON files (purpose, retired_at, id)
    WHERE retired_at IS NOT NULL AND deleted_at IS NULL;

-- The last real run of each scheduled job that has a cadence gate or a run time to report: a retention
-- policy (`retention:<name>`) or a sweep (`sweep:<prefix>`). In PostgreSQL, not in a process, so a restart
-- or a second scheduler replica keeps the gate.
CREATE TABLE schedule_runs (
    name         text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 300),
    last_run_at  timestamptz NOT NULL
);
