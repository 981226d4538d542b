"""Step j, scans that never came back (D19): a file pending past scan.pending_ttl has its scan sent again once,
then ends as error (and is purged), so that no file waits for a scan for ever."""

from __future__ import annotations

import logging
import uuid

from app.db import cleanup as sql
from app.db import scans as scans_sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.ages import pending_scan_action
from app.lifecycle.batches import CandidateStep
from app.lifecycle.steps.base import Run
from app.platform.jobs import enqueue_scan
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.cleanup")


def step(run: Run) -> CandidateStep:
    """Candidates by their last change (index files_scan_pending); decided again under the row lock."""

    def actions(conn: Conn, file_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        decided = {
            row.id: pending_scan_action(
                row.upload_state,
                row.scan_status,
                row.deleted,
                row.last_change_at,
                row.scan_resent_at,
                run.now,
                run.policy.scan_pending_ttl,
            )
            for row in sql.pending_scan_facts(conn, file_ids)
        }
        return {file_id: action for file_id, action in decided.items() if action is not None}

    def drive(uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock first (skipping rows a scan's record holds), then decide in fresh statements: a scan that
        # recorded its outcome before our lock is seen and left alone.
        due = actions(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        resend = [file_id for file_id, action in due.items() if action == "resend"]
        if resend:
            sql.set_scan_resent(uow.conn, resend, run.now)
            for file_id in resend:
                enqueue_scan(uow, file_id)
            log_event(
                log,
                "warning",
                "scan.resent",
                "scans still pending past scan.pending_ttl were sent again",
                count=len(resend),
            )
        for file_id, action in due.items():
            if action == "end" and scans_sql.record_outcome(uow, file_id, "error", run.now) is not None:
                log_event(
                    log,
                    "warning",
                    "scan.abandoned",
                    "a scan never came back; the file ends as error and is purged",
                    file_id=str(file_id),
                    reason="pending_ttl",
                )
        return len(due)

    cutoff = run.now - run.policy.scan_pending_ttl
    return CandidateStep(
        "j",
        "pending_scans",
        [lambda conn, cursor, limit: sql.pending_scans(conn, cutoff, cursor, limit)],
        lambda conn, ids: list(actions(conn, ids)),
        run.in_unit_of_work("j", drive),
    )
