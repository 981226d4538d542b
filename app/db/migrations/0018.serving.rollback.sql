DROP INDEX IF EXISTS files_listed;
DROP INDEX IF EXISTS files_by_uploader;
ALTER TABLE files DROP COLUMN IF EXISTS completed_at, DROP COLUMN IF EXISTS detected_type;
