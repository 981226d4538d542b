ALTER TABLE upload_sessions DROP COLUMN IF EXISTS completing_by, DROP COLUMN IF EXISTS writing_by;
