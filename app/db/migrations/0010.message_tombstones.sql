-- depends: 0009.every_file_ends
-- A deleted message keeps a tombstone (its author and the application's id) for
-- privacy.message_tombstone_ttl; the cleanup's step l removes older ones by this index.
CREATE INDEX messages_tombstones ON messages (deleted_at, author_id, id) WHERE deleted_at IS NOT NULL;
