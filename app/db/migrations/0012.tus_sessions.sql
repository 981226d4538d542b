-- depends: 0011.lifecycle_at_scale
-- tus 1.0 (D19): a tus upload is an upload session of protocol 'tus'. Its bytes arrive at any
-- offset and in any size: whole parts go into the session's parts as for the native API, and the bytes past
-- the last whole part (tail_bytes of them) wait in the object uploads/<file_id>/tail. A PATCH holds the
-- session for itself (writing_since, refreshed while its body arrives), so that two never interleave.
-- Constant defaults: no table rewrite.
ALTER TABLE upload_sessions
    ADD COLUMN protocol text NOT NULL DEFAULT 'native' CONSTRAINT upload_sessions_protocol CHECK (protocol IN ('native', 'tus')),
    ADD COLUMN tail_bytes bigint NOT NULL DEFAULT 0 CONSTRAINT upload_sessions_tail_bytes CHECK (tail_bytes >= 0),
    ADD COLUMN writing_since timestamptz;
