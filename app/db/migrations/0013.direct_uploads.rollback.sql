DROP TABLE IF EXISTS multipart_aborts;
ALTER TABLE upload_sessions DROP CONSTRAINT upload_sessions_protocol,
    ADD CONSTRAINT upload_sessions_protocol CHECK (protocol IN ('native', 'tus'));
