"""A scan outcome written under the file's row lock (D13), shared by the scan job and the cleanup step that
ends scans that never came back (D19)."""

from __future__ import annotations

from datetime import datetime
from typing import TypeGuard
from uuid import UUID

from app.db import files as files_sql
from app.db.files import FileRow
from app.db.uow import UnitOfWork
from app.db.events import write_file_updated
from app.platform.jobs import enqueue_purge


def scannable(row: FileRow | None) -> TypeGuard[FileRow]:
    """Complete, not deleted, scan still pending: the only state a scan outcome may be written in."""
    return row is not None and row.deleted_at is None and row.upload_state == "complete" \
        and row.scan_status == "pending"


def record_outcome(uow: UnitOfWork, file_id: UUID, outcome: str, now: datetime) -> str | None:
    """Write a scan outcome if the file is still complete, pending and not deleted; a failing outcome commits
    the purge of the file's objects with it (D7).

    Returns:
        The outcome written, or None when the file was deleted, purged or scanned meanwhile.
    """
    locked = files_sql.lock_file(uow.conn, file_id)
    if not scannable(locked):
        return None
    files_sql.set_scan_status(uow.conn, file_id, outcome, now)
    write_file_updated(uow, file_id, None, now)  # a job writes no actor
    if outcome in ("infected", "error"):
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
    return outcome
