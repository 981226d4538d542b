"""Step l, tombstones of deleted messages past privacy.message_tombstone_ttl: a deleted message's row is kept
that long (so its id is not taken again at once), then goes."""

from __future__ import annotations

from app.db import messages as messages_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run, in batches."""
    cutoff = run.now - run.policy.message_tombstone_ttl

    def prune(report: StepReport, dry_run: bool) -> None:
        run.delete_in_batches(
            report,
            dry_run,
            "cleanup.l",
            lambda conn: messages_sql.count_prunable(conn, cutoff),
            lambda conn, limit: messages_sql.prune(conn, cutoff, limit),
        )

    return WholeStep("l", "message_tombstones", prune)
