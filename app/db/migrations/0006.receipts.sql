-- depends: 0005.retention
-- D16 receipts: how each file was deleted is kept on its row from the mark on (deleted_via), and when its row
-- is purged a name-free receipt stays: the file id, how and when it was deleted, when its row went, how many
-- keys were deleted and how many a read of the store confirmed absent. No uploader, name, size or digest.
ALTER TABLE files ADD COLUMN deleted_via text CHECK (deleted_via ~ '^[a-z_]{1,32}$');

CREATE TABLE receipts (
    file_id                uuid PRIMARY KEY,
    via                    text NOT NULL CHECK (via ~ '^[a-z_]{1,32}$'),
    marked_at              timestamptz NOT NULL,
    purged_at              timestamptz NOT NULL,
    keys_deleted           integer NOT NULL CHECK (keys_deleted >= 0),
    keys_confirmed_absent  integer NOT NULL DEFAULT 0 CHECK (keys_confirmed_absent >= 0),
    CHECK (purged_at >= marked_at)
);

-- The cleanup removes receipts older than privacy.receipt_ttl, oldest first.
CREATE INDEX receipts_purged ON receipts (purged_at, file_id);
