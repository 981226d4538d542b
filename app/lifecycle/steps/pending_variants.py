"""Step o, variants jobs that never came back: a file whose variants are pending past image.pending_ttl has its
job sent again once, then gets no variants (reason lost), so that no file waits for its variants for ever. A
variant written by a job that died is deleted with its file by the purge (every variant name of the key
schema), whatever its row says."""

from __future__ import annotations

import logging
import uuid

from app.db import cleanup as sql
from app.db import variants as variants_sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.variants import pending_action
from app.lifecycle.batches import CandidateStep
from app.lifecycle.steps.base import Run
from app.platform.jobs import enqueue_variants
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.cleanup")


def step(run: Run) -> CandidateStep:
    """Candidates by the time their variants became pending; decided again under the row lock."""
    ttl = run.policy.variants_pending_ttl

    def actions(conn: Conn, file_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        decided = {
            row.id: pending_action(
                row.variants_state, row.deleted, row.variants_since, row.variants_resent_at, run.now, ttl
            )
            for row in variants_sql.pending_facts(conn, file_ids)
        }
        return {file_id: action for file_id, action in decided.items() if action is not None}

    def drive(uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock first (skipping rows a variants job holds), then decide in fresh statements.
        due = actions(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        resend = [file_id for file_id, action in due.items() if action == "resend"]
        if resend:
            variants_sql.set_resent(uow.conn, resend, run.now)
            for file_id in resend:
                enqueue_variants(uow, file_id)
            log_event(
                log,
                "warning",
                "variants.resent",
                "variants jobs pending past image.pending_ttl were sent again",
                count=len(resend),
            )
        ended = [file_id for file_id, action in due.items() if action == "end"]
        for file_id in ended:
            variants_sql.record_refused(uow.conn, file_id, "lost", run.now)
        if ended:
            uow.after_commit(lambda: metrics.VARIANTS.labels("lost").inc(len(ended)))
            log_event(
                log,
                "warning",
                "variants.abandoned",
                "variants jobs never came back; those files get no variants",
                count=len(ended),
            )
        return len(due)

    cutoff = run.now - ttl
    return CandidateStep(
        "o",
        "pending_variants",
        [lambda conn, cursor, limit: variants_sql.pending(conn, cutoff, cursor, limit)],
        lambda conn, ids: list(actions(conn, ids)),
        run.in_unit_of_work("o", drive),
    )
