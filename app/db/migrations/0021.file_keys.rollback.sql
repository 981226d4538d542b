ALTER TABLE receipts DROP COLUMN IF EXISTS keys_locked;
DROP INDEX IF EXISTS files_by_key_id;
ALTER TABLE files
  DROP CONSTRAINT IF EXISTS files_sealed_layout,
  DROP CONSTRAINT IF EXISTS files_key_sealed,
  DROP CONSTRAINT IF EXISTS files_key_whole,
  DROP COLUMN IF EXISTS piece_size,
  DROP COLUMN IF EXISTS wrapped_key,
  DROP COLUMN IF EXISTS key_id,
  DROP COLUMN IF EXISTS encrypted;
