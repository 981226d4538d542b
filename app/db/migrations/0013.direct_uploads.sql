-- depends: 0012.tus_sessions
-- Direct uploads (D19): a session of protocol 'direct' takes its parts straight into the S3 multipart
-- upload through presigned URLs. A part PUT in flight while AbortMultipartUpload runs may still land (AWS says
-- to abort again), so every abort of a direct upload is recorded here and repeated after file.direct_abort_delay
-- by the cleanup (step m), which then lists the multipart uploads of that key and keeps the row until none is
-- left. Ids and keys only: nothing names anyone. The row outlives the file's own (a deleted file's purge removes
-- its row at once).
ALTER TABLE upload_sessions DROP CONSTRAINT upload_sessions_protocol,
    ADD CONSTRAINT upload_sessions_protocol CHECK (protocol IN ('native', 'tus', 'direct'));

CREATE TABLE multipart_aborts (
    upload_id         text PRIMARY KEY,
    file_id           uuid NOT NULL,
    object_key        text NOT NULL,
    first_aborted_at  timestamptz NOT NULL,
    attempts          integer NOT NULL DEFAULT 1 CHECK (attempts >= 1)
);

-- Step m: the aborts due again, oldest first.
CREATE INDEX multipart_aborts_due ON multipart_aborts (first_aborted_at, upload_id);
