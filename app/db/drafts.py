"""SQL of drafts (D3). A draft names file ids checked in form and count only."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

from app.db.conn import Conn


def upsert_draft(conn: Conn, user_id: UUID, key: str, body: str, file_ids: Sequence[UUID],
                 now: datetime) -> Any:
    """Create or replace a user's draft by its key; returns the row."""
    return conn.execute(
        """
        INSERT INTO drafts (user_id, draft_key, body, file_ids, updated_at) VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (user_id, draft_key)
        DO UPDATE SET body = EXCLUDED.body, file_ids = EXCLUDED.file_ids, updated_at = EXCLUDED.updated_at
        RETURNING draft_key, body, file_ids, updated_at
        """,
        (user_id, key, body, list(file_ids), now),
    ).fetchone()


def drafts_of(conn: Conn, user_id: UUID) -> list[Any]:
    """A user's drafts, newest first."""
    return conn.execute("SELECT draft_key, body, file_ids, updated_at FROM drafts WHERE user_id = %s "
                        "ORDER BY draft_key", (user_id,)).fetchall()


def delete_draft(conn: Conn, user_id: UUID, key: str) -> int:
    """Remove a user's draft; returns whether one was there."""
    return conn.execute("DELETE FROM drafts WHERE user_id = %s AND draft_key = %s", (user_id, key)).rowcount
