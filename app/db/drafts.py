"""SQL of drafts (D3). A draft names file ids checked in form and count only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, one_as


@dataclass(frozen=True)
class DraftRow:
    """A draft: its key, body and the file ids it names."""

    draft_key: str
    body: str
    file_ids: list[UUID]
    updated_at: datetime


def upsert_draft(conn: Conn, user_id: UUID, key: str, body: str, file_ids: Sequence[UUID], now: datetime) -> DraftRow:
    """Create or replace a user's draft by its key; returns the row."""
    return one_as(
        conn,
        DraftRow,
        """
        INSERT INTO drafts (user_id, draft_key, body, file_ids, updated_at) VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (user_id, draft_key)
        DO UPDATE SET body = EXCLUDED.body, file_ids = EXCLUDED.file_ids, updated_at = EXCLUDED.updated_at
        RETURNING draft_key, body, file_ids, updated_at
        """,
        (user_id, key, body, list(file_ids), now),
    )


def drafts_of(conn: Conn, user_id: UUID) -> list[DraftRow]:
    """A user's drafts, by key."""
    return all_as(
        conn,
        DraftRow,
        "SELECT draft_key, body, file_ids, updated_at FROM drafts WHERE user_id = %s ORDER BY draft_key",
        (user_id,),
    )


def delete_draft(conn: Conn, user_id: UUID, key: str) -> int:
    """Remove a user's draft; returns whether one was there."""
    return conn.execute("DELETE FROM drafts WHERE user_id = %s AND draft_key = %s", (user_id, key)).rowcount
