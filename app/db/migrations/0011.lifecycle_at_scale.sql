-- depends: 0010.message_tombstones
-- An erasure forgets the subject as the actor of everyone's events and counts what is
-- left of them; without this index both scanned the whole events table, which is never pruned.
CREATE INDEX events_actor ON events (actor_id) WHERE actor_id IS NOT NULL;
