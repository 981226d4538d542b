"""Step g, old receipts: deletion receipts past privacy.receipt_ttl go, and so do the records of legal holds
released before it (name-free records kept as long as the receipts that name them)."""

from __future__ import annotations

from app.db import holds as holds_sql
from app.db import receipts as receipts_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run, in batches."""
    cutoff = run.now - run.policy.receipt_ttl

    def prune(report: StepReport, dry_run: bool) -> None:
        run.delete_in_batches(
            report,
            dry_run,
            "cleanup.g",
            lambda conn: receipts_sql.count_prunable(conn, cutoff),
            lambda conn, limit: receipts_sql.prune(conn, cutoff, limit),
        )
        run.delete_in_batches(
            report,
            dry_run,
            "cleanup.g",
            lambda conn: holds_sql.count_prunable(conn, cutoff),
            lambda conn, limit: holds_sql.prune(conn, cutoff, limit),
        )

    return WholeStep("g", "old_receipts", prune)
