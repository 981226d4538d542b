ALTER TABLE receipts DROP CONSTRAINT IF EXISTS receipts_deferral, DROP COLUMN IF EXISTS deferred_by_hold,
    DROP COLUMN IF EXISTS deferred_from, DROP COLUMN IF EXISTS deferred_until;
DROP TABLE IF EXISTS legal_holds;
DROP INDEX IF EXISTS files_deleted_by_uploader;
