"""Step c, failed and blocked rows: an attachment that failed, or was found infected or unscannable, older than
file.failed_row_ttl, is deleted (drafts do not protect these)."""

from __future__ import annotations

from app.db import cleanup as sql
from app.domain.ages import failed_row_expired
from app.lifecycle.batches import CandidateStep
from app.lifecycle.steps.base import Run
from app.lifecycle.steps.deleting import deleting


def step(run: Run) -> CandidateStep:
    """Candidates by their last change (index files_failed_candidates)."""
    cutoff = run.now - run.policy.failed_row_ttl
    return deleting(
        run,
        "c",
        "failed_rows",
        lambda conn, cursor, limit: sql.failed_candidates(conn, cutoff, cursor, limit),
        lambda facts: failed_row_expired(facts, run.now, run.policy.failed_row_ttl),
        own_drafts_protect=False,
        via="cleanup_failed",
    )
