"""SQL of the events table (D3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db import files as files_sql
from app.db.conn import Conn, all_as
from app.db.uow import UnitOfWork
from app.domain.ends import FilesSettled
from app.domain.file_events import FILE_UPDATED, FILE_UPDATED_VERSION, file_document


def insert_events(conn: Conn, events: list[dict[str, Any]]) -> None:
    """Insert events (keys: resource_kind, resource_id, type, schema_version, audience, actor, payload, now)."""
    with conn.cursor() as cur:
        cur.executemany(
            """
            INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, actor_id,
                                payload, created_at)
            VALUES (%(resource_kind)s, %(resource_id)s, %(type)s, %(schema_version)s, %(audience)s, %(actor)s,
                    %(payload)s, %(now)s)
            """,
            [dict(event, payload=Jsonb(event["payload"])) for event in events],
        )


@dataclass(frozen=True)
class EventRow:
    """A stored event, as listEvents shows it."""

    id: int
    resource_kind: str
    resource_id: UUID
    type: str
    schema_version: int
    actor_id: UUID | None
    payload: dict[str, Any]
    created_at: datetime
    redacted_at: datetime | None


def events_for(conn: Conn, audience: UUID, after: int, limit: int) -> list[EventRow]:
    """The audience's events with id > after, in order."""
    return all_as(
        conn,
        EventRow,
        """
        SELECT id, resource_kind, resource_id, type, schema_version, actor_id, payload, created_at, redacted_at
        FROM events WHERE audience_principal_id = %s AND id > %s ORDER BY id LIMIT %s
        """,
        (audience, after, limit),
    )


def write_file_updated(uow: UnitOfWork, file_id: UUID, actor_id: UUID | None, now: datetime) -> None:
    """Write the file.updated event of a change made earlier in this unit of work (reads the new row)."""
    write_files_updated(uow, [file_id], actor_id, now)


def write_files_updated(uow: UnitOfWork, file_ids: Sequence[UUID], actor_id: UUID | None, now: datetime) -> None:
    """One file.updated event for each of many files changed alike in this unit of work, in two statements."""
    rows = files_sql.files_by_ids(uow.conn, file_ids)
    insert_events(
        uow.conn,
        [
            dict(
                resource_kind="file",
                resource_id=row.id,
                type=FILE_UPDATED,
                schema_version=FILE_UPDATED_VERSION,
                audience=row.uploaded_by,
                actor=actor_id,
                payload={"file": file_document(row)},
                now=now,
            )
            for row in rows
        ],
    )


def announce_settled(uow: UnitOfWork, event: FilesSettled) -> None:
    """Tell the subscribers wired into the unit of work (app/lifecycle/ends.py) that files settled in it: the
    lifecycle webhooks are written in this transaction, sent after it commits."""
    if not event.file_ids:
        return
    for subscriber in uow.subscribers or ():
        subscriber.files_settled(uow, event)
