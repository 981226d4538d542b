"""Step e, temporary files: the fs driver's own `.tmp` entries older than file.upload_session_ttl (a write cut
off by a crash); a symbolic link is removed as an entry, never followed. Nothing on S3."""

from __future__ import annotations

from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run."""

    def sweep(report: StepReport, dry_run: bool) -> None:
        removed = run.rt.maintenance.sweep_tmp(run.now - run.policy.tmp_ttl, dry_run=dry_run)
        report.candidates = report.acted = removed

    return WholeStep("e", "temporary_files", sweep)
