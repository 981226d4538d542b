"""Steps b and c share one shape: candidates past an age, re-checked under their row locks with the pure rule of
app/domain/ages.py, and deleted through mark_deleted (D5)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from app.db import cleanup as sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.ages import CleanupFacts
from app.lifecycle.batches import CandidateStep, Page
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.steps.base import Run


def deleting(
    run: Run,
    letter: str,
    name: str,
    page: Page,
    rule: Callable[[CleanupFacts], bool],
    own_drafts_protect: bool,
    via: str,
) -> CandidateStep:
    """A step that marks deleted what `rule` says is past its age (and, with own_drafts_protect, what no draft
    of its own uploader names)."""

    def decide(conn: Conn, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        eligible = [row for row in sql.cleanup_facts(conn, ids) if rule(row) and row.id and row.uploaded_by]
        protected = (
            sql.protected_by_own_drafts(
                conn, [(row.id, row.uploaded_by) for row in eligible if row.id and row.uploaded_by]
            )
            if own_drafts_protect
            else set()
        )
        return [row.id for row in eligible if row.id and row.id not in protected]

    def act(uow: UnitOfWork, ids: list[uuid.UUID]) -> int:
        # Lock first (ascending id, skipping rows an attach or a delete holds), then re-check in fresh
        # statements: an attachment committed before our lock is seen (D10).
        doomed = decide(uow.conn, sql.lock_skip_locked(uow.conn, ids))
        return len(mark_deleted(uow, doomed, run.now, via)) if doomed else 0

    return CandidateStep(letter, name, [page], decide, run.in_unit_of_work(letter, act))
