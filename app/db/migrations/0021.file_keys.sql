-- depends: 0020.journal
-- Per-file keys: whether a file's objects are sealed (each file knows which it is, so a store may hold both),
-- its data key wrapped by a keyring key (the key's id beside it; both go when the file ends, so that nothing
-- this database or its backups hold opens the file's bytes again), and the plaintext size of each sealed piece
-- of its original (the upload's part size), which says where every segment lies.
ALTER TABLE files
  ADD COLUMN encrypted boolean NOT NULL DEFAULT false,
  ADD COLUMN key_id text,
  ADD COLUMN wrapped_key bytea,
  ADD COLUMN piece_size integer,
  ADD CONSTRAINT files_key_whole CHECK ((key_id IS NULL) = (wrapped_key IS NULL)),
  ADD CONSTRAINT files_key_sealed CHECK (wrapped_key IS NULL OR encrypted),
  ADD CONSTRAINT files_sealed_layout CHECK (NOT encrypted OR piece_size > 0);
-- `lethe keys status` and the roles' start-up check read the key ids live files need; rotation finds the files
-- of the keys that are not current.
CREATE INDEX files_by_key_id ON files (key_id, id) WHERE wrapped_key IS NOT NULL;
-- A receipt says how many versions of a file's objects a store's object lock still keeps (sealed under a key
-- that no longer exists).
ALTER TABLE receipts ADD COLUMN keys_locked integer NOT NULL DEFAULT 0;
