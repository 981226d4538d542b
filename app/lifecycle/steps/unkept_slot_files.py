"""Step h, avatars and logos no slot keeps (D16): a file of a slot's purpose that no slot keeps, older than
file.unattached_ttl, is deleted (a file set into a slot before the lock is seen kept, and stays)."""

from __future__ import annotations

import uuid

from app.db import cleanup as sql
from app.db import files as files_sql
from app.db import slots as slots_sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.ages import unkept_expired
from app.lifecycle.batches import CandidateStep
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.steps.base import Run


def step(run: Run) -> CandidateStep:
    """Candidates by their last change (index files_slot_candidates)."""
    cutoff = run.now - run.policy.unattached_ttl

    def unkept(conn: Conn, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        kept = slots_sql.kept(conn, file_ids)
        return [
            row.id
            for row in files_sql.files_by_ids(conn, file_ids)
            if unkept_expired(
                row.purpose,
                row.upload_state,
                row.deleted_at is not None,
                row.id in kept,
                row.last_change_at,
                run.now,
                run.policy.unattached_ttl,
            )
        ]

    def delete(uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock the files first (skipping rows a slot change has locked), then read the slots afresh.
        doomed = unkept(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        return len(mark_deleted(uow, doomed, run.now, "cleanup_unheld")) if doomed else 0

    return CandidateStep(
        "h",
        "unkept_slot_files",
        [lambda conn, cursor, limit: slots_sql.unkept_candidates(conn, cutoff, cursor, limit)],
        unkept,
        run.in_unit_of_work("h", delete),
    )
