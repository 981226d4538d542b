-- The code before this migration writes every row of journal_pending: the entries already written go first (it
-- would write them a second time), and so does a claim not yet written (its entries are written again).
DELETE FROM journal_pending WHERE seq <= (SELECT position FROM journal_state);
UPDATE journal_state SET writing_first = NULL, writing_last = NULL;
ALTER TABLE journal_state
  DROP COLUMN IF EXISTS adopted_from,
  DROP COLUMN IF EXISTS foreign_installations,
  DROP COLUMN IF EXISTS damaged,
  DROP COLUMN IF EXISTS head_digest,
  DROP COLUMN IF EXISTS writing_by,
  DROP COLUMN IF EXISTS writing_until;
DROP INDEX IF EXISTS journal_pending_by_seq;
DROP INDEX IF EXISTS journal_pending_unnumbered;
DROP INDEX IF EXISTS journal_pending_by_entry;
ALTER TABLE journal_pending DROP COLUMN IF EXISTS seq, DROP COLUMN IF EXISTS entry_id;
