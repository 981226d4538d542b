-- The code before this migration never reads a file's type after its completion: '' (read, nothing recognised)
-- goes back to unknown, as it was.
UPDATE files SET detected_type = NULL WHERE detected_type = '';
DROP INDEX IF EXISTS files_untyped;
