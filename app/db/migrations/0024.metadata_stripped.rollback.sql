-- The code before this migration shows an image inline through its preview only; a stripped original stays
-- stripped (its bytes are what the store holds), so nothing is lost but the record of it.
ALTER TABLE files DROP COLUMN IF EXISTS metadata_stripped;
ALTER TABLE files DROP COLUMN IF EXISTS size_as_sent;
