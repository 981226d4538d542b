"""SQL of slots (D16): the avatar of a principal, the branding logo. Lock order (D10): the slot row, then the
files rows in ascending id order, then what mark_deleted locks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one_as
from app.db.keyset import Candidate, Cursor, after

LOGO_HOLDER = UUID(int=0)


@dataclass(frozen=True)
class SlotRow:
    """A slot: its kind, its holder, the file in it (None: empty), and when it was set."""

    kind: str
    holder_id: UUID
    file_id: UUID | None
    set_at: datetime | None = None


def lock_slot(conn: Conn, kind: str, holder_id: UUID, now: datetime) -> SlotRow:
    """The slot row locked FOR UPDATE, made empty first if it never existed (so two first sets meet on one
    row lock instead of racing two inserts)."""
    conn.execute(
        "INSERT INTO slots (kind, holder_id, file_id, set_at) VALUES (%s, %s, NULL, %s) "
        "ON CONFLICT (kind, holder_id) DO NOTHING",
        (kind, holder_id, now),
    )
    return one_as(
        conn,
        SlotRow,
        "SELECT kind, holder_id, file_id, set_at FROM slots WHERE kind = %s AND holder_id = %s FOR UPDATE",
        (kind, holder_id),
    )


def slot(conn: Conn, kind: str, holder_id: UUID) -> SlotRow | None:
    """The slot row, or None."""
    return first_as(
        conn,
        SlotRow,
        "SELECT kind, holder_id, file_id, set_at FROM slots WHERE kind = %s AND holder_id = %s",
        (kind, holder_id),
    )


def set_file(conn: Conn, kind: str, holder_id: UUID, file_id: UUID | None, now: datetime) -> None:
    """Put a file (or None) into the slot."""
    conn.execute(
        "UPDATE slots SET file_id = %s, set_at = %s WHERE kind = %s AND holder_id = %s", (file_id, now, kind, holder_id)
    )


def kept(conn: Conn, file_ids: Sequence[UUID]) -> set[UUID]:
    """Of these files, those a slot keeps."""
    return {row.file_id for row in conn.execute("SELECT file_id FROM slots WHERE file_id = ANY(%s)", (list(file_ids),))}


def clear_holder(conn: Conn, holder_id: UUID) -> list[SlotRow]:
    """Empty every slot of a principal or keeping one of their files (erasure); returns the rows as they
    were, locked."""
    return all_as(
        conn,
        SlotRow,
        """
                  SELECT kind, holder_id, file_id, set_at FROM slots
                  WHERE holder_id = %s OR file_id IN (SELECT id FROM files WHERE uploaded_by = %s)
                  ORDER BY kind, holder_id FOR UPDATE
                  """,
        (holder_id, holder_id),
    )


def unkept_candidates(conn: Conn, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Avatars and logos, not deleted and no longer uploading, that no slot keeps, last changed at or before
    cutoff (index files_slot_candidates)."""
    extra, params = after(cursor, "last_change_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files f
        WHERE purpose IN ('avatar', 'branding') AND deleted_at IS NULL AND upload_state <> 'uploading'
          AND last_change_at <= %s{extra}
          AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.file_id = f.id)
        ORDER BY last_change_at, id LIMIT %s
        """,
        (cutoff, *params, limit),
    )


def delete_slot(conn: Conn, kind: str, holder_id: UUID) -> None:
    """Remove the slot row (an erased principal's avatar slot)."""
    conn.execute("DELETE FROM slots WHERE kind = %s AND holder_id = %s", (kind, holder_id))
