"""Step f, the deletion backlog: deleted rows not purged yet and the oldest mark (held files wait by design and
are left out), the files whose objects the store keeps refusing, and the legal holds in force; gauges, and a
warning (counts only) when the oldest mark is older than privacy.object_delete_delay."""

from __future__ import annotations

import logging
from datetime import timedelta

from app.db import cleanup as sql
from app.db import holds as holds_sql
from app.db import purge_failures as failures_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.cleanup")


def step(run: Run) -> WholeStep:
    """Once per run; its count is the run's backlog."""

    def measure(report: StepReport, dry_run: bool) -> None:
        db = run.rt.db
        row = db.read(sql.backlog)
        refused = db.read(failures_sql.failing)
        report.candidates = row.n
        age = (run.now - row.oldest) if row.oldest is not None else timedelta(0)
        if not dry_run:
            count_gauge, oldest_gauge = metrics.purge_backlog_gauges()
            count_gauge.set(row.n)
            oldest_gauge.set(max(age.total_seconds(), 0.0))
            metrics.purge_failing_gauge().set(refused.n)
            held = db.read(holds_sql.summary)
            active_gauge, held_gauge = metrics.hold_gauges()
            active_gauge.set(held.active)
            held_gauge.set(held.files_held)
        if row.oldest is not None and age > run.policy.object_delete_delay:
            log_event(
                log,
                "warning",
                "cleanup.backlog_overdue",
                "purge backlog older than privacy.object_delete_delay",
                count=row.n,
                refused=refused.n,
            )

    return WholeStep("f", "backlog", measure)
