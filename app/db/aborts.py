"""SQL of multipart_aborts (D19): the aborts of direct uploads, repeated and confirmed by cleanup m."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as


@dataclass(frozen=True)
class AbortRow:
    """A direct upload aborted, to abort again and confirm (cleanup m)."""

    upload_id: str
    file_id: UUID
    object_key: str
    first_aborted_at: datetime
    attempts: int


def record(conn: Conn, aborts: Sequence[tuple[str, UUID, str]], now: datetime) -> None:
    """Remember aborted direct uploads (upload id, file id, key); one already remembered keeps its first time."""
    if aborts:
        conn.cursor().executemany(
            "INSERT INTO multipart_aborts (upload_id, file_id, object_key, first_aborted_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (upload_id) DO NOTHING",
            [(upload_id, file_id, key, now) for upload_id, file_id, key in aborts],
        )


def due(conn: Conn, before: datetime, after: tuple[datetime, str] | None, limit: int) -> list[AbortRow]:
    """Aborts first made before `before`, after a (time, upload id) cursor, oldest first."""
    if after is None:
        return all_as(
            conn,
            AbortRow,
            "SELECT upload_id, file_id, object_key, first_aborted_at, attempts FROM multipart_aborts "
            "WHERE first_aborted_at < %s ORDER BY first_aborted_at, upload_id LIMIT %s",
            (before, limit),
        )
    return all_as(
        conn,
        AbortRow,
        "SELECT upload_id, file_id, object_key, first_aborted_at, attempts FROM multipart_aborts "
        "WHERE first_aborted_at < %s AND (first_aborted_at, upload_id) > (%s, %s) "
        "ORDER BY first_aborted_at, upload_id LIMIT %s",
        (before, *after, limit),
    )


def confirmed(conn: Conn, upload_ids: Sequence[str]) -> None:
    """Nothing is left of these uploads: forget them."""
    conn.execute("DELETE FROM multipart_aborts WHERE upload_id = ANY(%s)", (list(upload_ids),))


def again(conn: Conn, upload_ids: Sequence[str]) -> None:
    """These uploads were still listed: count one more attempt (the next run tries again)."""
    conn.execute("UPDATE multipart_aborts SET attempts = attempts + 1 WHERE upload_id = ANY(%s)", (list(upload_ids),))
