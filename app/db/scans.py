"""A scan outcome written under the file's row lock (D13), shared by the scan job and the cleanup step that
ends scans that never came back (D19). Which outcome a file may take, and which ends it, are rules of
app/domain/states.py; this module writes what they decide in the caller's transaction."""

from __future__ import annotations

from datetime import datetime
from typing import TypeGuard
from uuid import UUID

from app.db import files as files_sql
from app.db import variants as variants_sql
from app.db.events import announce_settled, write_file_updated
from app.db.files import FileRow
from app.db.uow import UnitOfWork
from app.domain.ends import FilesSettled
from app.domain.states import awaits_scan, checked_outcome, is_deliverable
from app.domain.variants import wants_variants
from app.domain.webhooks import scan_settled
from app.platform.jobs import enqueue_purge, enqueue_variants


def scannable(row: FileRow | None) -> TypeGuard[FileRow]:
    """Whether a scan outcome may still be written for this row."""
    return row is not None and awaits_scan(row.upload_state, row.scan_status, row.deleted_at is not None)


def record_outcome(
    uow: UnitOfWork, file_id: UUID, outcome: str, now: datetime, *, variants: bool = False, reason: str | None = None
) -> str | None:
    """Write a scan outcome if the file is still complete, pending and not deleted; an outcome that leaves the
    file undeliverable commits the purge of its objects with it (D7), one that makes an image deliverable the
    job that makes its variants (with `variants`: image.variants).

    Returns:
        The outcome written, or None when the file was deleted, purged or scanned meanwhile.
    """
    locked = files_sql.lock_file(uow.conn, file_id)
    if not scannable(locked):
        return None
    return _write(uow, locked, outcome, now, variants, reason)


def record_checked(
    uow: UnitOfWork,
    file_id: UUID,
    outcome: str,
    measured: tuple[int, str],
    expected_sha256: str | None,
    now: datetime,
    *,
    variants: bool = False,
) -> str | None:
    """A scan outcome of a file whose digest the scan measured (a direct upload): the outcome
    `states.checked_outcome` decides, and the digest kept when the file stays.

    Returns:
        The outcome written (`failed` for a mismatch), or None when the file was deleted, purged or scanned
        meanwhile.
    """
    locked = files_sql.lock_file(uow.conn, file_id)
    if not scannable(locked):
        return None
    decided = checked_outcome(outcome, measured, locked.size_bytes, expected_sha256)
    if decided != "failed":
        files_sql.set_sha256(uow.conn, file_id, measured[1])
    mismatch = "size_mismatch" if measured[0] != locked.size_bytes else "checksum_mismatch"
    return _write(uow, locked, decided, now, variants, mismatch if decided == "failed" else None)


def _write(
    uow: UnitOfWork, locked: FileRow, outcome: str, now: datetime, variants: bool, reason: str | None = None
) -> str:
    """Record the outcome; `reason`: why a file failed, when the scan knows better than its outcome says."""
    file_id = locked.id
    if outcome == "failed":
        files_sql.set_failed(uow.conn, file_id, now)
        upload_state, scan_status = "failed", "pending"
    else:
        files_sql.set_scan_status(uow.conn, file_id, outcome, now)
        upload_state, scan_status = "complete", outcome
    write_file_updated(uow, file_id, None, now)  # a job writes no actor
    settled = scan_settled(outcome)
    if settled is not None:
        announce_settled(uow, FilesSettled(settled[0], (file_id,), now, reason=reason or settled[1]))
    if not is_deliverable(upload_state, scan_status):
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
    elif variants and wants_variants(locked.detected_type):
        variants_sql.set_pending(uow.conn, file_id, now)
        enqueue_variants(uow, file_id)
    return outcome
