ALTER TABLE webhook_deliveries DROP COLUMN IF EXISTS leased_until;
DELETE FROM legal_holds WHERE subject_forgotten_at IS NOT NULL;
ALTER TABLE legal_holds DROP CONSTRAINT IF EXISTS legal_holds_target,
    ADD CONSTRAINT legal_holds_check CHECK ((subject_id IS NULL) <> (file_id IS NULL)),
    DROP COLUMN IF EXISTS subject_forgotten_at, DROP COLUMN IF EXISTS files_lost;
ALTER TABLE receipts DROP COLUMN IF EXISTS hold_too_late, DROP COLUMN IF EXISTS removal_began_at;
ALTER TABLE files DROP COLUMN IF EXISTS removal_begun_at;
