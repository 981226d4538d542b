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


def record_checked(uow: UnitOfWork, file_id: UUID, outcome: str, measured: tuple[int, str],
                   expected_sha256: str | None, now: datetime) -> str | None:
    """A scan outcome of a file whose digest the scan measured (a direct upload, issue 26): a size or digest
    that is not the declared one fails the file (its purge committed with it) whatever clamd said; else the
    digest is kept and the outcome written as record_outcome does.

    Returns:
        The outcome written (`failed` for a mismatch), or None when the file was deleted, purged or scanned
        meanwhile.
    """
    locked = files_sql.lock_file(uow.conn, file_id)
    if not scannable(locked):
        return None
    size, digest = measured
    if size != locked.size_bytes or (expected_sha256 is not None and digest != expected_sha256):
        files_sql.set_failed(uow.conn, file_id, now)
        write_file_updated(uow, file_id, None, now)
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return "failed"
    files_sql.set_sha256(uow.conn, file_id, digest)
    return record_outcome(uow, file_id, outcome, now)
