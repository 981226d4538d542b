"""SQL of messages and attachments (D3). A message is named by its author and the application's id: ids
are scoped by author, so no user can claim, block or probe another's (docs/decisions.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, first_as


def ensure_message(conn: Conn, author_id: UUID, message_id: str, now: datetime) -> None:
    """Record the author's message if it is new (ids are scoped by author)."""
    conn.execute(
        "INSERT INTO messages (author_id, id, created_at) VALUES (%s, %s, %s) ON CONFLICT (author_id, id) DO NOTHING",
        (author_id, message_id, now),
    )


@dataclass(frozen=True)
class MessageRow:
    """A message of an author (a tombstone once deleted_at is set)."""

    id: str
    author_id: UUID
    created_at: datetime
    deleted_at: datetime | None


def lock_message(conn: Conn, author_id: UUID, message_id: str) -> MessageRow | None:
    """The author's message locked FOR UPDATE (D10: the message first), or None."""
    return first_as(
        conn,
        MessageRow,
        "SELECT id, author_id, created_at, deleted_at FROM messages WHERE author_id = %s AND id = %s FOR UPDATE",
        (author_id, message_id),
    )


def attached_file_ids(conn: Conn, author_id: UUID, message_id: str) -> list[UUID]:
    """The files attached to the author's message, in the order they were attached."""
    return [
        row.file_id
        for row in conn.execute(
            "SELECT file_id FROM attachments WHERE author_id = %s AND message_id = %s ORDER BY attached_at, file_id",
            (author_id, message_id),
        )
    ]


def attachments_of_files(conn: Conn, file_ids: Sequence[UUID]) -> dict[UUID, str]:
    """file id -> the message it is attached to, for those of file_ids that are attached."""
    return {
        row.file_id: row.message_id
        for row in conn.execute(
            "SELECT file_id, message_id FROM attachments WHERE file_id = ANY(%s)", (list(file_ids),)
        )
    }


def insert_attachments(conn: Conn, author_id: UUID, message_id: str, file_ids: Sequence[UUID], now: datetime) -> None:
    """Attach files to the author's message."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO attachments (author_id, message_id, file_id, attached_at) VALUES (%s, %s, %s, %s)",
            [(author_id, message_id, file_id, now) for file_id in file_ids],
        )


def delete_attachments(conn: Conn, author_id: UUID, message_id: str) -> int:
    """Remove the attachment rows of the author's message; returns how many."""
    return conn.execute(
        "DELETE FROM attachments WHERE author_id = %s AND message_id = %s", (author_id, message_id)
    ).rowcount


def set_message_deleted(conn: Conn, author_id: UUID, message_id: str, now: datetime) -> None:
    """A message keeps a tombstone, so that its author deleting it again gets 204."""
    conn.execute(
        "UPDATE messages SET deleted_at = %s WHERE author_id = %s AND id = %s AND deleted_at IS NULL",
        (now, author_id, message_id),
    )


def detach_files(conn: Conn, file_ids: Sequence[UUID]) -> int:
    """Remove the attachment rows of these files (retention with include_attached: the message stays)."""
    return conn.execute("DELETE FROM attachments WHERE file_id = ANY(%s)", (list(file_ids),)).rowcount


def prune(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` tombstones of messages deleted at or before cutoff (index messages_tombstones)."""
    return conn.execute(
        """
        DELETE FROM messages WHERE (author_id, id) IN (
            SELECT author_id, id FROM messages WHERE deleted_at IS NOT NULL AND deleted_at <= %s
            ORDER BY deleted_at LIMIT %s)
        """,
        (cutoff, limit),
    ).rowcount


def count_prunable(conn: Conn, cutoff: datetime) -> int:
    """How many deleted messages' tombstones are older than the cutoff (dry run of step l)."""
    row = conn.execute(
        "SELECT count(*) AS n FROM messages WHERE deleted_at IS NOT NULL AND deleted_at <= %s", (cutoff,)
    ).fetchone()
    return int(row.n) if row is not None else 0
