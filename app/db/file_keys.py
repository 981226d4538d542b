"""SQL of the files' wrapped data keys: their destruction when a file ends, the key ids live files need, counts
per key id, and rotation (re-wrapping by the current keyring key). One function per statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID

from psycopg.rows import class_row

from app.db.conn import Conn, one


def destroy(conn: Conn, file_ids: Sequence[UUID]) -> int:
    """Destroy the data keys of these files (their wrapped bytes and the id of the key that wrapped them):
    nothing the database holds opens their objects any more. Returns how many keys went."""
    if not file_ids:
        return 0
    return conn.execute(
        "UPDATE files SET key_id = NULL, wrapped_key = NULL WHERE id = ANY(%s) AND wrapped_key IS NOT NULL",
        (sorted(set(file_ids)),),
    ).rowcount


def key_ids_in_use(conn: Conn) -> list[str]:
    """The ids of the keyring keys that wrap a live data key, in order: one index step per distinct id (a loose
    index scan), never a pass over the files."""
    rows = conn.execute(
        """
        WITH RECURSIVE used(key_id) AS (
            (SELECT key_id FROM files WHERE wrapped_key IS NOT NULL ORDER BY key_id LIMIT 1)
            UNION ALL
            SELECT (SELECT f.key_id FROM files f WHERE f.wrapped_key IS NOT NULL AND f.key_id > used.key_id
                    ORDER BY f.key_id LIMIT 1)
            FROM used WHERE used.key_id IS NOT NULL
        )
        SELECT key_id FROM used WHERE key_id IS NOT NULL
        """
    ).fetchall()
    return [row.key_id for row in rows]


@dataclass(frozen=True)
class KeyCounts:
    """Files by how their objects are kept: sealed under a live data key (per id of the keyring key wrapping it),
    sealed with the key destroyed (a row that outlives its end: a failed or blocked file kept for its uploader,
    or a deleted file whose purge is still to come), and in plaintext (written with file.encryption off)."""

    by_key_id: dict[str, int] = field(default_factory=dict)
    destroyed: int = 0
    plaintext: int = 0


def counts(conn: Conn) -> KeyCounts:
    """How many files each key id wraps, and how many rows are sealed without a key or in plaintext."""
    by_key = {
        row.key_id: row.files
        for row in conn.execute(
            "SELECT key_id, count(*) AS files FROM files WHERE wrapped_key IS NOT NULL GROUP BY key_id ORDER BY key_id"
        )
    }
    row = one(
        conn.execute(
            "SELECT count(*) FILTER (WHERE encrypted AND wrapped_key IS NULL) AS destroyed, "
            "count(*) FILTER (WHERE NOT encrypted) AS plaintext FROM files"
        )
    )
    return KeyCounts(by_key_id=by_key, destroyed=row.destroyed, plaintext=row.plaintext)


@dataclass(frozen=True)
class WrappedRow:
    """A file's wrapped data key, as rotation reads it."""

    id: UUID
    key_id: str
    wrapped_key: bytes = field(repr=False)


def lock_wrapped_by(conn: Conn, key_id: str, after: UUID, limit: int) -> list[WrappedRow]:
    """The next files (by id, after `after`) whose data key `key_id` wraps, locked FOR UPDATE (in id order, as
    every writer locks files: D10); rows another transaction holds are skipped and met again in a later pass."""
    with conn.cursor(row_factory=class_row(WrappedRow)) as cur:
        return cur.execute(
            "SELECT id, key_id, wrapped_key FROM files WHERE wrapped_key IS NOT NULL AND key_id = %s AND id > %s "
            "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            (key_id, after, limit),
        ).fetchall()


def some_wrapped_by(conn: Conn, key_id: str, limit: int) -> list[WrappedRow]:
    """A few files whose data key `key_id` wraps (the first by id, through the index of key ids)."""
    with conn.cursor(row_factory=class_row(WrappedRow)) as cur:
        return cur.execute(
            "SELECT id, key_id, wrapped_key FROM files WHERE wrapped_key IS NOT NULL AND key_id = %s "
            "ORDER BY id LIMIT %s",
            (key_id, limit),
        ).fetchall()


def count_wrapped_by(conn: Conn, key_id: str) -> int:
    """How many live data keys `key_id` wraps (through the index of key ids)."""
    row = one(
        conn.execute("SELECT count(*) AS files FROM files WHERE wrapped_key IS NOT NULL AND key_id = %s", (key_id,))
    )
    return int(row.files)


def set_wrapped(conn: Conn, rows: Sequence[WrappedRow]) -> int:
    """Store data keys wrapped again (rotation), only where a key still exists (a file that ended meanwhile
    keeps its key destroyed). Returns how many rows changed."""
    if not rows:
        return 0
    return conn.execute(
        "UPDATE files f SET key_id = v.key_id, wrapped_key = v.wrapped_key "
        "FROM unnest(%s::uuid[], %s::text[], %s::bytea[]) AS v(id, key_id, wrapped_key) "
        "WHERE f.id = v.id AND f.wrapped_key IS NOT NULL",
        ([row.id for row in rows], [row.key_id for row in rows], [row.wrapped_key for row in rows]),
    ).rowcount
