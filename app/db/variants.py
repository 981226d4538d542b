"""SQL of image variants: a file's variants state (files.variants_*) and its rows in file_variants. A variant's
row is written ('writing') in the transaction that checks its file is still live, before its object, and made
'ready' after, so that the purge, the audit and the erasure know of every variant a file may have."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as
from app.db.keyset import Candidate, Cursor, after
from app.domain.variants import Made


@dataclass(frozen=True)
class VariantRow:
    """One variant of a file as recorded."""

    file_id: UUID
    name: str
    state: str
    size_bytes: int
    width: int
    height: int
    content_type: str
    created_at: datetime


def set_pending(conn: Conn, file_id: UUID, now: datetime) -> None:
    """The file's variants are to be made (its job commits with this)."""
    conn.execute(
        "UPDATE files SET variants_state = 'pending', variants_reason = NULL, variants_since = %s WHERE id = %s",
        (now, file_id),
    )


def record_writing(conn: Conn, file_id: UUID, names: Sequence[str], content_type: str, now: datetime) -> None:
    """Record the variants about to be written (before their objects exist)."""
    conn.execute(
        """
        INSERT INTO file_variants (file_id, name, state, content_type, created_at)
        SELECT %s, name, 'writing', %s, %s FROM unnest(%s::text[]) AS name
        ON CONFLICT (file_id, name) DO UPDATE SET state = 'writing', created_at = excluded.created_at
        """,
        (file_id, content_type, now, list(names)),
    )


def record_ready(conn: Conn, file_id: UUID, made: Sequence[Made], now: datetime) -> None:
    """The variants written are ready to serve; the file's variants are ready."""
    for variant in made:
        conn.execute(
            "UPDATE file_variants SET state = 'ready', size_bytes = %s, width = %s, height = %s, "
            "content_type = %s WHERE file_id = %s AND name = %s",
            (len(variant.data), variant.width, variant.height, variant.content_type, file_id, variant.name),
        )
    conn.execute(
        "UPDATE files SET variants_state = 'ready', variants_reason = NULL, variants_since = %s WHERE id = %s",
        (now, file_id),
    )


def record_refused(conn: Conn, file_id: UUID, reason: str, now: datetime) -> None:
    """The file gets no variants, and why (its own bytes stay deliverable)."""
    conn.execute("DELETE FROM file_variants WHERE file_id = %s AND state = 'writing'", (file_id,))
    conn.execute(
        "UPDATE files SET variants_state = 'refused', variants_reason = %s, variants_since = %s WHERE id = %s",
        (reason, now, file_id),
    )


def variant_of(conn: Conn, file_id: UUID, name: str) -> VariantRow | None:
    """One ready variant of a file, or None."""
    rows = all_as(
        conn,
        VariantRow,
        "SELECT file_id, name, state, size_bytes, width, height, content_type, created_at "
        "FROM file_variants WHERE file_id = %s AND name = %s AND state = 'ready'",
        (file_id, name),
    )
    return rows[0] if rows else None


@dataclass(frozen=True)
class PendingVariants:
    """What the cleanup decides on for a file whose variants job has not come back, read after the lock."""

    id: UUID
    variants_state: str | None
    variants_since: datetime | None
    variants_resent_at: datetime | None
    deleted: bool


def pending(conn: Conn, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Files whose variants are pending since at or before `cutoff`, oldest first (index
    files_variants_pending)."""
    extra, params = after(cursor, "variants_since")
    return all_as(
        conn,
        Candidate,
        f"SELECT id, variants_since AS at FROM files WHERE variants_state = 'pending' "
        f"AND variants_since <= %s{extra} ORDER BY variants_since, id LIMIT %s",
        (cutoff, *params, limit),
    )


def pending_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[PendingVariants]:
    """The variants state of these files (read after their lock)."""
    return all_as(
        conn,
        PendingVariants,
        "SELECT id, variants_state, variants_since, variants_resent_at, "
        "deleted_at IS NOT NULL AS deleted FROM files WHERE id = ANY(%s) ORDER BY id",
        (list(file_ids),),
    )


def set_resent(conn: Conn, file_ids: Sequence[UUID], now: datetime) -> None:
    """The variants jobs of these files were sent again (once)."""
    conn.execute(
        "UPDATE files SET variants_resent_at = %s, variants_since = %s WHERE id = ANY(%s)", (now, now, list(file_ids))
    )
