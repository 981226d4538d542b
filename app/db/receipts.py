"""SQL of deletion receipts (D16): written with the row delete of the purge (app/db/files.delete_rows), read
by id, confirmed by the erasure, and removed after privacy.receipt_ttl by the cleanup."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

from app.db.conn import Conn, one

COLUMNS = ("file_id, via, marked_at, purged_at, keys_deleted, keys_confirmed_absent, deferred_by_hold, deferred_from, "
           "deferred_until")


def receipt_of(conn: Conn, file_id: UUID) -> Any:
    """The receipt of a purged file, or None."""
    return conn.execute(f"SELECT {COLUMNS} FROM receipts WHERE file_id = %s", (file_id,)).fetchone()


def receipts_of(conn: Conn, file_ids: Sequence[UUID]) -> list[Any]:
    """The receipts of these files, by file id."""
    return conn.execute(f"SELECT {COLUMNS} FROM receipts WHERE file_id = ANY(%s) ORDER BY file_id",
                        (list(file_ids),)).fetchall()


def set_confirmed_absent(conn: Conn, counts: dict[UUID, int]) -> None:
    """Record how many keys of each file a read of the store found absent."""
    if counts:
        conn.execute(
            """
            UPDATE receipts r SET keys_confirmed_absent = c.n
            FROM unnest(%s::uuid[], %s::int[]) AS c(id, n) WHERE r.file_id = c.id
            """, (list(counts), list(counts.values())))


def delete_expired(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` receipts purged before cutoff, oldest first (index receipts_purged)."""
    return conn.execute(
        """
        DELETE FROM receipts WHERE file_id IN (
            SELECT file_id FROM receipts WHERE purged_at < %s ORDER BY purged_at, file_id LIMIT %s)
        """, (cutoff, limit)).rowcount


def count_expired(conn: Conn, cutoff: datetime) -> int:
    """How many receipts were purged before cutoff (the cleanup's dry run)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM receipts WHERE purged_at < %s", (cutoff,))).n)
