"""Events (D3, D13): the caller's events in order, with a cursor. Writing the `file.updated` event of a change
is app.db.events.write_file_updated (in the change's transaction); its document is app.domain.file_events."""

from __future__ import annotations

from uuid import UUID

from app.db import events as sql
from app.db.events import EventRow
from app.db.pool import Database


def list_events(db: Database, principal_id: UUID, after: int, limit: int) -> list[EventRow]:
    """The caller's events with id > after, in order (the cursor is the last id)."""
    return db.read(lambda conn: sql.events_for(conn, principal_id, after, limit))
