"""SQL of messages and attachments (D3)."""

from __future__ import annotations

from datetime import datetime
from typing import Sequence
from uuid import UUID

import psycopg


def ensure_message(conn: psycopg.Connection, message_id: str, author_id: UUID, now: datetime) -> None:
    conn.execute("INSERT INTO messages (id, author_id, created_at) VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING",
                 (message_id, author_id, now))


def lock_message(conn: psycopg.Connection, message_id: str):
    return conn.execute("SELECT id, author_id, created_at, deleted_at FROM messages WHERE id = %s FOR UPDATE",
                        (message_id,)).fetchone()


def attached_file_ids(conn: psycopg.Connection, message_id: str) -> list[UUID]:
    return [row.file_id for row in conn.execute(
        "SELECT file_id FROM attachments WHERE message_id = %s ORDER BY attached_at, file_id", (message_id,))]


def attachments_of_files(conn: psycopg.Connection, file_ids: Sequence[UUID]) -> dict[UUID, str]:
    """file id -> the message it is attached to, for those of file_ids that are attached."""
    return {row.file_id: row.message_id for row in conn.execute(
        "SELECT file_id, message_id FROM attachments WHERE file_id = ANY(%s)", (list(file_ids),))}


def insert_attachments(conn: psycopg.Connection, message_id: str, file_ids: Sequence[UUID], now: datetime) -> None:
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO attachments (message_id, file_id, attached_at) VALUES (%s, %s, %s)",
                        [(message_id, file_id, now) for file_id in file_ids])


def delete_attachments(conn: psycopg.Connection, message_id: str) -> int:
    return conn.execute("DELETE FROM attachments WHERE message_id = %s", (message_id,)).rowcount


def set_message_deleted(conn: psycopg.Connection, message_id: str, now: datetime) -> None:
    """A message keeps a tombstone, so that its author deleting it again gets 204."""
    conn.execute("UPDATE messages SET deleted_at = %s WHERE id = %s AND deleted_at IS NULL", (now, message_id))
