"""Step m, direct uploads aborted again and confirmed gone: a part PUT in flight while AbortMultipartUpload ran
may still land (AWS: abort again). Every abort of a direct upload older than file.direct_abort_delay is repeated,
then the uploads of its key are listed (that key only); a row goes once none is listed, else every listed upload
of the key is aborted and the row waits for the next run. Each abort asks the one rule for bytes (a legal hold
keeps the upload). A store-wide error ends the step."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from app.db import aborts as aborts_sql
from app.db import keeps as keeps_sql
from app.domain.ends import Clearance, Reach
from app.errors import ObjectFailed
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep
from app.platform.observability.logs import log_event
from app.storage.base import MultipartRef

log = logging.getLogger("lethe.cleanup")


def step(run: Run) -> WholeStep:
    """Once per run, in batches of recorded aborts."""

    def again(cleared: Clearance, row: Any) -> bool:
        """Abort once more, then list the key's uploads and abort each: True when any was still listed, or the
        rule kept it."""
        if row.file_id not in cleared:
            return True
        # The record names no store: a direct upload went to an S3 store, aborted again in each (an abort of an
        # upload a store does not know succeeds).
        listed: list[str] = []
        for name in run.rt.store_names:
            if not run.rt.store_named(name).supports_direct:
                continue
            ref = MultipartRef(str(row.file_id), row.object_key, row.upload_id)
            run.rt.files.abort_uploads(cleared, {row.file_id: [ref]}, store=name)
            found = run.rt.store_named(name).uploads_of(row.object_key)
            run.rt.files.abort_uploads(
                cleared,
                {row.file_id: [MultipartRef(str(row.file_id), row.object_key, upload_id) for upload_id in found]},
                store=name,
            )
            listed += found
        return bool(listed)

    def confirm(report: StepReport, dry_run: bool) -> None:
        db, batch = run.rt.db, run.policy.batch_size
        before = run.now - run.policy.direct_abort_delay
        cursor: tuple[datetime, str] | None = None
        while True:
            rows = db.read(lambda conn: aborts_sql.due(conn, before, cursor, batch))
            report.candidates += len(rows)
            report.batches += 1
            if rows and not dry_run:
                gone: list[str] = []
                left: list[str] = []
                cleared = db.unit_of_work(
                    lambda uow: keeps_sql.clearance(uow, [row.file_id for row in rows], Reach.FILE, run.now),
                    name="cleanup.m",
                )
                for row in rows:
                    try:
                        (left if again(cleared, row) else gone).append(row.upload_id)
                    except ObjectFailed:  # this upload refused: the others go on, it is tried at the next run
                        report.failed += 1
                if gone:
                    db.unit_of_work(lambda uow: aborts_sql.confirmed(uow.conn, gone), name="cleanup.m")
                if left:
                    db.unit_of_work(lambda uow: aborts_sql.again(uow.conn, left), name="cleanup.m")
                    log_event(
                        log,
                        "warning",
                        "cleanup.uploads_left",
                        "aborted direct uploads were still listed; aborted again, confirmed at the next run",
                        count=len(left),
                    )
                report.acted += len(gone)
                report.kept += len(left)
            if len(rows) < batch:
                return
            cursor = (rows[-1].first_aborted_at, rows[-1].upload_id)

    return WholeStep("m", "multipart_aborts", confirm)
