-- The code before this migration writes no traceparent: the jobs waiting keep theirs no longer.
ALTER TABLE outbox DROP COLUMN IF EXISTS traceparent;
