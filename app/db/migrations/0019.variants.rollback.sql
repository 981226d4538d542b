ALTER TABLE receipts DROP COLUMN IF EXISTS variants_deleted;
DROP INDEX IF EXISTS files_variants_pending;
DROP TABLE IF EXISTS file_variants;
ALTER TABLE files DROP COLUMN IF EXISTS variants_resent_at, DROP COLUMN IF EXISTS variants_since,
  DROP COLUMN IF EXISTS variants_reason, DROP COLUMN IF EXISTS variants_state;
