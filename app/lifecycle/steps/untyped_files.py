"""Step p, files whose type was never read: a complete, deliverable file completed before type detection existed
(or whose first bytes could not be read at its completion) has its first bytes read now, outside any transaction,
and the type they show recorded under its row; an image among them gets its variants as a new one would. A file
whose bytes show no known type is recorded as such and never read again; one that cannot be read now waits for
the next run. A run reads for at most UNTYPED_SECONDS, so that an installation with millions of such files
spreads the reading over its runs."""

from __future__ import annotations

import logging
import time
import uuid

from app.db import files as files_sql
from app.db import variants as variants_sql
from app.db.uow import UnitOfWork
from app.domain.detection import HEAD_BYTES, UNRECOGNISED, detect
from app.domain.states import is_deliverable
from app.domain.variants import wants_variants
from app.errors import ContentCorrupt, NotFound, StorageError
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep
from app.platform.jobs import enqueue_variants
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.cleanup")
UNTYPED_SECONDS = 30.0  # the reading a run gives this step


def step(run: Run) -> WholeStep:
    """Batches of file.gc_batch_size in id order, within the run's time for it."""

    def read_types(report: StepReport, dry_run: bool) -> None:
        started, after = time.monotonic(), None
        while time.monotonic() - started < UNTYPED_SECONDS:
            rows = run.rt.db.read(lambda conn: files_sql.untyped(conn, after, run.policy.batch_size))
            report.candidates += len(rows)
            if not rows:
                return
            report.batches += 1
            after = rows[-1].id
            if dry_run:
                report.acted += len(rows)
            else:
                found: dict[uuid.UUID, str] = {}
                for row in rows:  # K1: the store is read outside every transaction
                    try:
                        found[row.id] = detect(run.rt.files.head(row, HEAD_BYTES)) or UNRECOGNISED
                    except (NotFound, StorageError, ContentCorrupt):
                        report.kept += 1  # read again next run (a missing original answers 410 meanwhile)
                if found:
                    report.acted += run.rt.db.unit_of_work(lambda uow: record(uow, found), name="cleanup.p")
            if len(rows) < run.policy.batch_size:
                return

    def record(uow: UnitOfWork, found: dict[uuid.UUID, str]) -> int:
        recorded = 0
        for file_id, detected in sorted(found.items()):
            row = files_sql.set_detected_type(uow.conn, file_id, detected)
            if row is None:
                continue  # deleted, or read by another run meanwhile
            recorded += 1
            if (
                run.policy.variants
                and row.variants_state is None
                and wants_variants(row.detected_type)
                and is_deliverable(row.upload_state, row.scan_status)
            ):
                variants_sql.set_pending(uow.conn, file_id, run.now)
                enqueue_variants(uow, file_id)
        if recorded:
            log_event(
                log,
                "info",
                "cleanup.types_read",
                "the types of files completed before type detection were read",
                count=recorded,
            )
        return recorded

    return WholeStep("p", "untyped_files", read_types)
