"""Step r, store copies: the copies a migration between stores left in the store a file moved from (and copies
that never became their file's) are removed once due, under the one rule; a running migration that waits for
files to become movable, or whose job ran out of retries, gets its next batch."""

from __future__ import annotations

from app.db import stores as stores_sql
from app.lifecycle import stores
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run, in batches of file.gc_batch_size until a batch comes back smaller."""

    def remove(report: StepReport, dry_run: bool) -> None:
        if dry_run:
            due = run.rt.db.read(lambda conn: stores_sql.due(conn, run.now, run.policy.batch_size))
            report.candidates += len(due)
            report.acted += len(due)
            return
        while True:
            removed = stores.remove_left(run.rt, run.policy.batch_size)
            report.candidates += removed.removed + removed.held + removed.refused
            report.acted += removed.removed
            if removed.removed + removed.held + removed.refused < run.policy.batch_size or not removed.removed:
                break
        stores.resume_running(run.rt)

    return WholeStep("r", "store_copies", remove)
