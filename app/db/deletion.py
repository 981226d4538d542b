"""SQL of the deletion requests (deleteFile and its batch, D12): what they read under the files' row locks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence
from uuid import UUID

from psycopg.rows import class_row

from app.db.conn import Conn, one
from app.db.files import COLUMNS, FileRow


@dataclass(frozen=True)
class StoredEvent:
    """A stored event of a file, not yet redacted (D6)."""

    id: int
    resource_id: UUID
    type: str
    schema_version: int
    payload: Any


@dataclass(frozen=True)
class LockedForDelete:
    """The files rows locked for a delete (ascending id), which of them are attached, and their stored
    events not yet redacted, both read after the rows' locks were granted."""

    rows: list[FileRow]
    attached: set[UUID]
    stored: list[StoredEvent]


def lock_for_delete(conn: Conn, file_ids: Sequence[UUID]) -> LockedForDelete:
    """Lock the files rows (ascending id, D10), then read in one statement which are attached and their
    unredacted stored events. The second statement takes its own snapshot (READ COMMITTED), after the locks
    were granted: an attach that held a row first is seen (D10), and so is an event its writer committed
    under the row's lock. The events need no lock of their own: every writer of a file's events holds the
    file's row lock, which this transaction now holds (issue 24: two statements, where there were four)."""
    ids = list(file_ids)
    with conn.cursor(row_factory=class_row(FileRow)) as cur:
        rows = cur.execute(f"SELECT {COLUMNS} FROM files WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
                           (ids,)).fetchall()
    if not rows:
        return LockedForDelete(rows=[], attached=set(), stored=[])
    checked = one(conn.execute(
        """
        SELECT ARRAY(SELECT file_id FROM attachments WHERE file_id = ANY(%(ids)s)) AS attached,
               coalesce((SELECT jsonb_agg(jsonb_build_array(id, resource_id, type, schema_version, payload)
                                          ORDER BY id)
                         FROM events WHERE resource_kind = 'file' AND resource_id = ANY(%(ids)s)
                           AND redacted_at IS NULL), '[]') AS stored
        """, {"ids": [row.id for row in rows]}))
    return LockedForDelete(
        rows=rows, attached=set(checked.attached),
        stored=[StoredEvent(event_id, UUID(file_id), event_type, version, payload)
                for event_id, file_id, event_type, version, payload in checked.stored])
