ALTER TABLE upload_sessions DROP COLUMN IF EXISTS writing_since, DROP COLUMN IF EXISTS tail_bytes,
    DROP COLUMN IF EXISTS protocol;
