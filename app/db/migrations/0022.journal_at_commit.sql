-- depends: 0021.file_keys
-- The journal written at commit by every process. An entry has an id from its commit on (a process that could not
-- reach the database to number it writes it to the journal's spool by that id) and is numbered by the claim of a
-- segment (seq), then kept a while once written, so that a spooled entry is recognised. One claim at a time, leased:
-- a writer that dies holding it is taken over, with the same entries and numbers. A reconciliation records the
-- damage it finds in the journal; a database restored from a backup older than its journal adopts the journal
-- the store holds (or refuses it as foreign).
ALTER TABLE journal_pending
  ADD COLUMN entry_id uuid NOT NULL DEFAULT gen_random_uuid(),
  ADD COLUMN seq bigint;
CREATE UNIQUE INDEX journal_pending_by_entry ON journal_pending (entry_id);
CREATE INDEX journal_pending_unnumbered ON journal_pending (id) WHERE seq IS NULL;
CREATE INDEX journal_pending_by_seq ON journal_pending (seq) WHERE seq IS NOT NULL;
ALTER TABLE journal_state
  ADD COLUMN writing_until timestamptz,
  ADD COLUMN writing_by uuid,
  ADD COLUMN head_digest text,
  ADD COLUMN damaged jsonb,
  ADD COLUMN foreign_installations uuid[] NOT NULL DEFAULT '{}',
  ADD COLUMN adopted_from uuid;
-- A segment the code before this migration recorded as being written is written again by the new claim.
UPDATE journal_state SET writing_first = NULL, writing_last = NULL;
