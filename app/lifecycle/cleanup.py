# The cleanup deletes what nobody deleted by hand. It runs alone in the cluster (an advisory lock), reads
# the clock once, and runs its steps in order. Each step over candidates reads them by (time, id) in batches of
# file.gc_batch_size; every candidate is re-checked under its row lock with the pure rules of
# app/domain/ages.py before anything is marked. Deleting goes through mark_deleted (D5) only; removing bytes
# through the one rule for bytes only. One failing candidate never undoes the others (a savepoint each when a
# batch fails); a database error ends only its step, and the run reports the first error after the last step
# (D8).
"""cleanup_pending (D8): one runner of the steps of app/lifecycle/steps/, and its dry run.

A step over candidates is a small value: its pages read a batch by (time, id) after a cursor, `decide` says
which of a batch's ids the step acts on now (read-only, so the dry run calls it alone and cannot drift from
the real path), and `act` does it, locking first and calling its own `decide` again under the lock. The other
steps run once per run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from app.db import cleanup as sql
from app.db import console as console_sql
from app.db.locks import exclusive
from app.errors import StorageError
from app.lifecycle.batches import CandidateStep, StepReport, run_candidates
from app.lifecycle.steps import CleanupPolicy, Run, steps_of
from app.platform import tracing
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.cleanup")
__all__ = ["CleanupPolicy", "CleanupReport", "run_cleanup"]


@dataclass
class CleanupReport:
    """What one run did, step by step."""

    ran: bool
    dry_run: bool = False
    now: datetime | None = None
    steps: list[StepReport] = field(default_factory=list)
    first_error: BaseException | None = None
    backlog: int | None = None

    def step(self, letter: str) -> StepReport:
        """The report of the step of this label."""
        return next(s for s in self.steps if s.step == letter)


def run_cleanup(
    rt: Runtime, dry_run: bool = False, on_step: Callable[[StepReport], None] | None = None
) -> CleanupReport:
    """Run the cleanup once, unless another run holds the cluster-wide lock.

    Returns:
        The report; `first_error` holds the first error of a step (the caller raises it after logging).
    """
    with rt.db.maintenance(), exclusive(rt.db, sql.CLEANUP_LOCK_KEY) as mine:
        if not mine:
            log_event(log, "info", "cleanup.busy", "cleanup already running elsewhere")
            metrics.CLEANUP_RUNS.labels("busy").inc()
            return CleanupReport(ran=False, dry_run=dry_run)
        return _run_locked(rt, CleanupPolicy.from_config(rt.cfg), dry_run, on_step)


def _run_locked(
    rt: Runtime, policy: CleanupPolicy, dry_run: bool, on_step: Callable[[StepReport], None] | None = None
) -> CleanupReport:
    now = rt.clock.now()  # read once (D8)
    report = CleanupReport(ran=True, dry_run=dry_run, now=now)
    for step in steps_of(Run(rt, policy, now)):
        step_report = StepReport(step.letter, step.name)
        started = time.monotonic()
        try:
            with tracing.span("cleanup.step", step=step.letter, step_name=step.name, dry_run=dry_run):
                try:
                    if isinstance(step, CandidateStep):
                        run_candidates(rt.db, step, step_report, policy.batch_size, dry_run)
                    else:
                        step.run(step_report, dry_run)
                finally:
                    tracing.count(
                        candidates=step_report.candidates,
                        acted=step_report.acted,
                        kept=step_report.kept,
                        failed=step_report.failed,
                    )
        except (psycopg.Error, StorageError) as exc:
            step_report.error = type(exc).__name__
            report.first_error = report.first_error or exc
            log_event(
                log,
                "warning",
                "cleanup.step_failed",
                "cleanup step ended early",
                step=step.letter,
                step_name=step.name,
                error=type(exc).__name__,
            )
        step_report.duration_s = round(time.monotonic() - started, 4)
        report.steps.append(step_report)
        if on_step is not None:
            on_step(step_report)  # progress on a terminal (lethe cleanup)
        if not dry_run:
            metrics.CLEANUP_STEP_DURATION.labels(step.letter).observe(step_report.duration_s)
            for outcome in ("acted", "kept", "failed"):
                metrics.CLEANUP_FILES.labels(step.letter, outcome).inc(getattr(step_report, outcome))
        log_event(
            log,
            "info",
            "cleanup.step",
            "cleanup step",
            step=step.letter,
            step_name=step.name,
            dry_run=dry_run,
            candidates=step_report.candidates,
            acted=step_report.acted,
            kept=step_report.kept,
            failed=step_report.failed,
            batches=step_report.batches,
            duration_s=step_report.duration_s,
        )
    report.backlog = report.step("f").candidates
    if not dry_run:
        metrics.CLEANUP_RUNS.labels("failed" if report.first_error else "ok").inc()
        _keep_counts(rt, now, report.steps)
    return report


def _keep_counts(rt: Runtime, now: datetime, steps: list[StepReport]) -> None:
    """Keep what each step found and did, for the console's backlog per step; a failure to keep them costs the
    console its numbers, never the run."""
    runs = [
        console_sql.StepRun(s.step, s.name, now, s.candidates, s.acted, s.kept, s.failed, s.error, s.duration_s)
        for s in steps
    ]
    try:
        rt.db.unit_of_work(lambda uow: console_sql.record_steps(uow.conn, now, runs), name="cleanup.counts")
    except psycopg.Error as exc:
        log_event(log, "warning", "cleanup.counts_not_kept", "step counts not kept", error=type(exc).__name__)
