"""SQL of upload_sessions and upload_parts (D3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one_as

SESSION_COLUMNS = (
    "file_id, state, part_size, part_count, storage_upload_id, expected_sha256, created_at, "
    "expires_at, completed_at, completing_since, protocol, tail_bytes, writing_since"
)


@dataclass(frozen=True)
class SessionRow:
    """An upload session (D3): its state, part plan, the store's multipart upload, its expiry, the lease of a
    completion and the write lease of a tus PATCH, and its protocol (native, tus, direct)."""

    file_id: UUID
    state: str
    part_size: int
    part_count: int
    storage_upload_id: str | None
    expected_sha256: str | None
    created_at: datetime
    expires_at: datetime
    completed_at: datetime | None
    completing_since: datetime | None
    protocol: str
    tail_bytes: int
    writing_since: datetime | None


@dataclass(frozen=True)
class PartRow:
    """A part received."""

    part_number: int
    size_bytes: int
    etag: str


def insert_session(conn: Conn, row: dict[str, Any]) -> SessionRow:
    """Insert the upload session of a new file (open, with its expiry and part plan); returns it as a read would."""
    return one_as(
        conn,
        SessionRow,
        f"""
        INSERT INTO upload_sessions (file_id, state, part_size, part_count, storage_upload_id, expected_sha256,
                                     created_at, expires_at, protocol)
        VALUES (%(file_id)s, 'open', %(part_size)s, %(part_count)s, %(storage_upload_id)s, %(expected_sha256)s,
                %(created_at)s, %(expires_at)s, %(protocol)s)
        RETURNING {SESSION_COLUMNS}
        """,
        {"protocol": "native", **row},
    )


def session_of(conn: Conn, file_id: UUID) -> SessionRow | None:
    """The file's upload session, or None; no lock."""
    return first_as(conn, SessionRow, f"SELECT {SESSION_COLUMNS} FROM upload_sessions WHERE file_id = %s", (file_id,))


def lock_session(conn: Conn, file_id: UUID) -> SessionRow | None:
    """The session locked FOR UPDATE (after its file row: D10)."""
    return first_as(
        conn, SessionRow, f"SELECT {SESSION_COLUMNS} FROM upload_sessions WHERE file_id = %s FOR UPDATE", (file_id,)
    )


def parts_of(conn: Conn, file_id: UUID) -> list[PartRow]:
    """The parts received for a file, by part number."""
    return all_as(
        conn,
        PartRow,
        "SELECT part_number, size_bytes, etag FROM upload_parts WHERE file_id = %s ORDER BY part_number",
        (file_id,),
    )


def upsert_part(conn: Conn, file_id: UUID, part_number: int, size_bytes: int, etag: str, now: datetime) -> None:
    """Record a received part (a part sent again replaces the row)."""
    conn.execute(
        """
        INSERT INTO upload_parts (file_id, part_number, size_bytes, etag, received_at)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (file_id, part_number)
        DO UPDATE SET size_bytes = EXCLUDED.size_bytes, etag = EXCLUDED.etag, received_at = EXCLUDED.received_at
        """,
        (file_id, part_number, size_bytes, etag, now),
    )


def delete_parts(conn: Conn, file_id: UUID) -> None:
    """Remove the part rows of a file (completed, aborted or expired)."""
    conn.execute("DELETE FROM upload_parts WHERE file_id = %s", (file_id,))


def set_completed(conn: Conn, file_id: UUID, now: datetime) -> None:
    """The session completed: its completion lease ends and it takes no more parts."""
    conn.execute(
        "UPDATE upload_sessions SET state = 'completed', completed_at = %s, completing_since = NULL WHERE file_id = %s",
        (now, file_id),
    )


def set_state(conn: Conn, file_id: UUID, state: str) -> None:
    """Set the session's state (aborted, expired)."""
    conn.execute("UPDATE upload_sessions SET state = %s, completing_since = NULL WHERE file_id = %s", (state, file_id))


def take_completion_lease(conn: Conn, file_id: UUID, now: datetime, holder: UUID) -> None:
    """Mark the (locked, open) session as being completed since now by the process `holder`: the lease of one
    completion."""
    conn.execute(
        "UPDATE upload_sessions SET completing_since = %s, completing_by = %s WHERE file_id = %s",
        (now, holder, file_id),
    )


def end_completion_lease(conn: Conn, file_id: UUID, leased_at: datetime) -> None:
    """End a completion's lease (it failed in the store), unless another completion took it over."""
    conn.execute(
        "UPDATE upload_sessions SET completing_since = NULL WHERE file_id = %s AND completing_since = %s",
        (file_id, leased_at),
    )


# -- tus: a PATCH has its session's write lease (writing_since) and keeps the bytes past the last whole part in
# the tail object, tail_bytes of them.


def take_write_lease(conn: Conn, file_id: UUID, now: datetime, holder: UUID) -> None:
    """Mark the (locked, open) tus session as written by one PATCH of the process `holder` since now."""
    conn.execute(
        "UPDATE upload_sessions SET writing_since = %s, writing_by = %s WHERE file_id = %s", (now, holder, file_id)
    )


def end_leases_not_of(conn: Conn, holder: UUID) -> int:
    """End every write lease and completion lease another process took: called by a `lethe dev` that
    knows every other process of its installation is gone (its folder's lock). Returns how many."""
    return conn.execute(
        """
        UPDATE upload_sessions SET
            writing_since = CASE WHEN writing_by IS DISTINCT FROM %(me)s THEN NULL ELSE writing_since END,
            writing_by = CASE WHEN writing_by IS DISTINCT FROM %(me)s THEN NULL ELSE writing_by END,
            completing_since = CASE WHEN completing_by IS DISTINCT FROM %(me)s THEN NULL ELSE completing_since END,
            completing_by = CASE WHEN completing_by IS DISTINCT FROM %(me)s THEN NULL ELSE completing_by END
        WHERE state = 'open' AND ((writing_since IS NOT NULL AND writing_by IS DISTINCT FROM %(me)s)
                                  OR (completing_since IS NOT NULL AND completing_by IS DISTINCT FROM %(me)s))
        """,
        {"me": holder},
    ).rowcount


def renew_write_lease(conn: Conn, file_id: UUID, leased_at: datetime, now: datetime) -> bool:
    """Renew a PATCH's write lease while its body arrives; False when it was taken over (or the session ended)."""
    return (
        conn.execute(
            "UPDATE upload_sessions SET writing_since = %s WHERE file_id = %s AND writing_since = %s "
            "AND state = 'open'",
            (now, file_id, leased_at),
        ).rowcount
        == 1
    )


def end_write_lease(conn: Conn, file_id: UUID, leased_at: datetime) -> None:
    """End a PATCH's write lease, unless another PATCH took it over."""
    conn.execute(
        "UPDATE upload_sessions SET writing_since = NULL WHERE file_id = %s AND writing_since = %s",
        (file_id, leased_at),
    )


def set_tail(conn: Conn, file_id: UUID, tail_bytes: int) -> None:
    """How many bytes of the tail object count (0: none; the object may hold more, never fewer)."""
    conn.execute("UPDATE upload_sessions SET tail_bytes = %s WHERE file_id = %s", (tail_bytes, file_id))


def open_upload_ids(conn: Conn, file_ids: Sequence[UUID]) -> set[tuple[UUID, str]]:
    """(file id, store upload id) of the open sessions of these files (the audit's multipart pass)."""
    rows = conn.execute(
        "SELECT file_id, storage_upload_id FROM upload_sessions WHERE file_id = ANY(%s) "
        "AND state = 'open' AND storage_upload_id IS NOT NULL",
        (list(file_ids),),
    ).fetchall()
    return {(row.file_id, row.storage_upload_id) for row in rows}
