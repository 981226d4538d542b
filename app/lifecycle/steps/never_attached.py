"""Step b, never attached: a deliverable attachment no message ever named, older than file.unattached_ttl, is
deleted, unless a draft of its own uploader names it (a file id in somebody else's draft protects nothing)."""

from __future__ import annotations

from app.db import cleanup as sql
from app.domain.ages import unattached_expired
from app.lifecycle.batches import CandidateStep
from app.lifecycle.steps.base import Run
from app.lifecycle.steps.deleting import deleting


def step(run: Run) -> CandidateStep:
    """Candidates by their last change (index files_unattached_candidates)."""
    cutoff = run.now - run.policy.unattached_ttl
    return deleting(
        run,
        "b",
        "never_attached",
        lambda conn, cursor, limit: sql.unattached_candidates(conn, cutoff, cursor, limit),
        lambda facts: unattached_expired(facts, run.now, run.policy.unattached_ttl),
        own_drafts_protect=True,
        via="cleanup_unattached",
    )
