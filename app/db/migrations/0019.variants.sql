-- depends: 0018.serving
-- Image variants: a row per variant, written before its object (state 'writing') and made 'ready' after, so
-- that the purge, the audit and the erasure know every variant a file may have; the file's variants state
-- (pending while a job makes them, ready, or refused with a reason) and when it last changed.
ALTER TABLE files
  ADD COLUMN variants_state text CHECK (variants_state IN ('pending', 'ready', 'refused')),
  ADD COLUMN variants_reason text,
  ADD COLUMN variants_since timestamptz,
  ADD COLUMN variants_resent_at timestamptz;
CREATE TABLE file_variants (
  file_id uuid NOT NULL REFERENCES files (id) ON DELETE CASCADE,
  name text NOT NULL CHECK (name IN ('thumb-small', 'thumb-large', 'preview', 'poster')),
  state text NOT NULL CHECK (state IN ('writing', 'ready')),
  size_bytes bigint NOT NULL DEFAULT 0,
  width integer NOT NULL DEFAULT 0,
  height integer NOT NULL DEFAULT 0,
  content_type text NOT NULL,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (file_id, name)
);
-- The cleanup's step for variant jobs that never came back reads pending files by age.
CREATE INDEX files_variants_pending ON files (variants_since, id) WHERE variants_state = 'pending';
-- A receipt says how many variants its file had (their keys are among keys_deleted).
ALTER TABLE receipts ADD COLUMN variants_deleted integer NOT NULL DEFAULT 0;
