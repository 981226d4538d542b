ALTER TABLE upload_sessions DROP COLUMN IF EXISTS completing_since;
