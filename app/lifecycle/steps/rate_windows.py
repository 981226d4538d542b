"""Step q, rate windows: the counts of rate-limit windows that ended go (a window lasts a day at most)."""

from __future__ import annotations

from datetime import timedelta

from app.db import rates as rates_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep

LONGEST_WINDOW = timedelta(days=1)  # rate_limits.* take windows of 1s to 1d


def step(run: Run) -> WholeStep:
    """Once per run, in batches."""
    ended_before = run.now - LONGEST_WINDOW

    def prune(report: StepReport, dry_run: bool) -> None:
        run.delete_in_batches(
            report,
            dry_run,
            "cleanup.q",
            lambda conn: rates_sql.count_prunable(conn, ended_before),
            lambda conn, limit: rates_sql.prune(conn, ended_before, limit),
        )

    return WholeStep("q", "rate_windows", prune)
