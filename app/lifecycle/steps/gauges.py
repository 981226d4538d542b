"""Step k, gauges of what could stay: scans pending and the oldest of them (D19), and the dead tuples each table
keeps until VACUUM."""

from __future__ import annotations

from app.db import cleanup as sql
from app.db import vacuum as vacuum_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep
from app.platform.observability import metrics


def step(run: Run) -> WholeStep:
    """Once per run; the dry run only counts."""

    def measure(report: StepReport, dry_run: bool) -> None:
        row = run.rt.db.read(sql.pending_summary)
        report.candidates = row.n
        if dry_run:
            return
        count_gauge, oldest_gauge = metrics.scan_pending_gauges()
        count_gauge.set(row.n)
        oldest_gauge.set(max((run.now - row.oldest).total_seconds(), 0.0) if row.oldest is not None else 0.0)
        for table, dead in run.rt.db.read(vacuum_sql.dead_tuples).items():
            metrics.dead_tuples_gauge().labels(table).set(dead)

    return WholeStep("k", "gauges", measure)
