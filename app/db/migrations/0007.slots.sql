-- depends: 0006.receipts
-- D16 slots: the avatar of each principal and the branding logo (holder: the nil uuid). A slot row exists
-- from the first time it is set or cleared; file_id NULL is an empty slot. A file sits in at most one slot,
-- and a file in a slot cannot lose its row (RESTRICT): releasing it empties the slot in the same
-- transaction that marks it deleted.
CREATE TABLE slots (
    kind       text NOT NULL CHECK (kind IN ('avatar', 'logo')),
    holder_id  uuid NOT NULL,
    file_id    uuid REFERENCES files (id) ON DELETE RESTRICT,
    set_at     timestamptz NOT NULL,
    PRIMARY KEY (kind, holder_id),
    CONSTRAINT slots_file_once UNIQUE (file_id)
);

-- The cleanup's unheld rule: avatars and logos not deleted, by (last_change_at, id).
CREATE INDEX files_slot_candidates ON files (last_change_at, id)
    WHERE purpose IN ('avatar', 'branding') AND deleted_at IS NULL;
