"""Step h, avatars and logos no slot holds (D16): a file of a slot's purpose that no slot holds, older than
file.unattached_ttl, is deleted (a file set into a slot before the lock is seen held and kept)."""

from __future__ import annotations

import uuid

from app.db import cleanup as sql
from app.db import files as files_sql
from app.db import slots as slots_sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.ages import unheld_expired
from app.lifecycle.batches import CandidateStep
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.steps.base import Run


def step(run: Run) -> CandidateStep:
    """Candidates by their last change (index files_slot_candidates)."""
    cutoff = run.now - run.policy.unattached_ttl

    def unheld(conn: Conn, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        held = slots_sql.held(conn, file_ids)
        return [row.id for row in files_sql.files_by_ids(conn, file_ids)
                if unheld_expired(row.purpose, row.upload_state, row.deleted_at is not None, row.id in held,
                                  row.last_change_at, run.now, run.policy.unattached_ttl)]

    def release(uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock the files first (skipping rows a slot change holds), then read the slots afresh.
        doomed = unheld(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        return len(mark_deleted(uow, doomed, run.now, "cleanup_unheld")) if doomed else 0

    return CandidateStep("h", "unheld_slot_files",
                         [lambda conn, cursor, limit: slots_sql.unheld_candidates(conn, cutoff, cursor, limit)],
                         unheld, run.in_unit_of_work("h", release))
