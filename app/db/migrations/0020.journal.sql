-- depends: 0019.variants
-- The deletion journal: where this database stands against the journal outside it (the last entry it wrote or
-- applied), the installation's identity, the key a person's hash is made with (when journal.key is not set),
-- and the entries committed with their change, waiting to be written to the journal (numbered then).
CREATE TABLE journal_state (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  installation_id uuid NOT NULL DEFAULT gen_random_uuid(),
  hash_key text NOT NULL DEFAULT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''),
  position bigint NOT NULL DEFAULT 0,
  writing_first bigint,  -- a segment being written (its numbers), before the position moves past it
  writing_last bigint,
  reconciled_to bigint NOT NULL DEFAULT 0,
  restore_seen_at timestamptz,
  reconciled_at timestamptz
);
INSERT INTO journal_state DEFAULT VALUES;
CREATE TABLE journal_pending (
  id bigserial PRIMARY KEY,
  kind text NOT NULL,
  at timestamptz NOT NULL,
  body jsonb NOT NULL
);
