-- depends: 0001.schema
-- D7: a file whose objects the store refused is isolated from the others of its batch. Its attempts and the
-- time of its next attempt live here (not on files, so the hot table keeps its shape); the cleanup's
-- catch-up skips a file until its next attempt is due. The row goes with its file (ON DELETE CASCADE) or
-- when a later purge of the file succeeds.
CREATE TABLE purge_failures (
    file_id          uuid PRIMARY KEY REFERENCES files (id) ON DELETE CASCADE,
    attempts         integer NOT NULL CHECK (attempts >= 1),
    error_code       text NOT NULL CHECK (error_code ~ '^[A-Za-z0-9_.-]{1,64}$'),
    failing_since    timestamptz NOT NULL,
    last_attempt_at  timestamptz NOT NULL,
    next_attempt_at  timestamptz NOT NULL,
    warned_at        timestamptz
);

CREATE INDEX purge_failures_due ON purge_failures (next_attempt_at, file_id);
