DROP TABLE schedule_runs;
DROP INDEX files_retired;
DROP INDEX files_retention_candidates;
ALTER TABLE files DROP CONSTRAINT files_retired_live;
ALTER TABLE files DROP COLUMN retired_at;
