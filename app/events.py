"""Events (D3): one `file.updated` (schema version 1, payload {"file": File}) to the uploader for every
change of upload_state or scan_status, written in the transaction of the change. Jobs write no actor."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

from app.db import events as sql
from app.db import files as files_sql
from app.db.core import UnitOfWork

FILE_UPDATED = "file.updated"
FILE_UPDATED_VERSION = 1


def file_document(row) -> dict[str, Any]:
    """The File representation of a files row: JSON-ready, no null members (absent instead)."""
    doc: dict[str, Any] = {
        "id": str(row.id),
        "uploaded_by": str(row.uploaded_by),
        "purpose": row.purpose,
        "original_name": row.original_name,
        "mime_type": row.mime_type,
        "size_bytes": row.size_bytes,
        "upload_state": row.upload_state,
        "scan_status": row.scan_status,
        "created_at": _iso(row.created_at),
        "thumbnails": [],
    }
    if row.sha256:
        doc["sha256"] = row.sha256
    if row.scope_id:
        doc["scope_id"] = str(row.scope_id)
    if row.scanned_at:
        doc["scanned_at"] = _iso(row.scanned_at)
    return doc


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def write_file_updated(uow: UnitOfWork, file_id: UUID, actor_id: UUID | None, now: datetime) -> None:
    """Write the file.updated event of a change made earlier in this unit of work (reads the new row)."""
    write_files_updated(uow, [file_id], actor_id, now)


def write_files_updated(uow: UnitOfWork, file_ids: Sequence[UUID], actor_id: UUID | None, now: datetime) -> None:
    """One file.updated event for each of many files changed alike in this unit of work, in two statements."""
    rows = files_sql.files_by_ids(uow.conn, file_ids)
    sql.insert_events(uow.conn, [
        dict(resource_kind="file", resource_id=row.id, type=FILE_UPDATED, schema_version=FILE_UPDATED_VERSION,
             audience=row.uploaded_by, actor=actor_id, payload={"file": file_document(row)}, now=now)
        for row in rows])


def list_events(db, principal_id: UUID, after: int, limit: int) -> list:
    """The caller's events with id > after, in order (the cursor is the last id)."""
    return db.read(lambda conn: sql.events_for(conn, principal_id, after, limit))
