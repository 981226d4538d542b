-- Refused while any file is sealed: without these columns the code before them would take a sealed original for
-- plaintext and serve its ciphertext, and the data keys (the only way to open those files) would be dropped.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM files WHERE encrypted) THEN
    RAISE EXCEPTION 'files are sealed under per-file keys: this rollback would drop their keys and serve ciphertext'
      USING HINT = 'Delete or purge the sealed files first (lethe keys status counts them).';
  END IF;
END
$$;
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
