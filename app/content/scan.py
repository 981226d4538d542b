"""The scan (D13): stream the original to clamd, or mark it `skipped` when no clamd is configured.

The outcome is written under the file's row lock, only if the file is still complete, pending and not
deleted: a job whose file row is gone or deleted ends without error and without writes (D9).
"""

from __future__ import annotations

import logging
import uuid

from app.content import clamd
from app.db import files as files_sql
from app.db.events import write_file_updated
from app.jobs import enqueue_purge
from app.logs import log_event

log = logging.getLogger("lethe.scan")


def _scannable(row) -> bool:
    return row is not None and row.deleted_at is None and row.upload_state == "complete" \
        and row.scan_status == "pending"


def scan_file(rt, file_id: uuid.UUID) -> str | None:
    """Scan one file and record the outcome.

    Returns:
        The outcome written, or None when there was nothing to do.

    Raises:
        clamd.ClamdUnavailable: clamd did not answer; the job retries.
    """
    row = rt.db.read(lambda conn: files_sql.file_by_id(conn, file_id))
    if not _scannable(row):
        return None
    address = rt.cfg.scan.clamd_address
    if not address:
        outcome = "skipped"
    else:
        chunks = rt.store.open(row.object_key)
        try:
            outcome = clamd.instream(address, chunks, rt.cfg.scan.timeout.total_seconds())
        finally:
            chunks.close()

    def record(uow):
        locked = files_sql.lock_file(uow.conn, file_id)
        if not _scannable(locked):
            return None  # deleted, purged or scanned meanwhile
        now = rt.clock.now()
        files_sql.set_scan_status(uow.conn, file_id, outcome, now)
        write_file_updated(uow, file_id, None, now)  # a job writes no actor
        if outcome in ("infected", "error"):
            enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return outcome

    written = rt.db.unit_of_work(record, name="scan.record")
    if written is not None:
        log_event(log, "info", "scan.done", "file scanned", file_id=str(file_id), outcome=written)
    return written
