# Retention deletes by age (D16, seed 003). A run of a policy reads the clock once. It retires settled, live
# files of its purpose past max_age (gone to their readers, objects kept, nothing redacted), then deletes
# through mark_deleted (D5) the files retired longer than the grace: with grace 0s a file goes the whole way
# in one run. Every candidate is re-checked under its row lock (ascending id, SKIP LOCKED) with the pure rules
# of app/domain/retention.py; one failing candidate never undoes the others (lifecycle/batches.py). One
# runner per policy at a time (an advisory lock, D19); the cadence gate is a row in schedule_runs written only
# when a run finished, so a restart or a second scheduler cannot run a gated policy twice, and a failed run
# is not mistaken for one that happened.
"""Retention policies: a run, its dry run, and the restore of a retired file."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from app.db import files as files_sql
from app.db import messages as messages_sql
from app.db import retention as sql
from app.db.cleanup import lock_skip_locked
from app.db.files import FileRow
from app.db.locks import exclusive
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.retention import Policy, RetentionFacts, delete_due, gate_open, retire_due
from app.errors import Conflict, Forbidden, NotFound
from app.lifecycle.batches import CandidateStep, StepReport, isolated, run_candidates
from app.lifecycle.deletion import mark_deleted
from app.platform import tracing
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.retention")


@dataclass
class PolicyReport:
    """What one policy did (or, in a dry run, would do), as counts."""

    policy: str
    ran: bool
    dry_run: bool = False
    skipped_reason: str | None = None
    last_run_at: datetime | None = None
    steps: list[StepReport] = field(default_factory=list)
    error: str | None = None
    first_error: BaseException | None = None

    def count(self, step: str) -> int:
        return next((s.acted for s in self.steps if s.name == step), 0)


def _steps(rt: Runtime, policy: Policy, now: datetime) -> list[CandidateStep]:
    def decider(
        rule: Callable[[RetentionFacts, Policy, datetime], bool],
    ) -> Callable[[psycopg.Connection, list[uuid.UUID]], list[uuid.UUID]]:
        def decide(conn: psycopg.Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
            return [row.id for row in sql.retention_facts(conn, ids) if row.id and rule(row, policy, now)]

        return decide

    decide_retire, decide_delete = decider(retire_due), decider(delete_due)

    def retire(uow: UnitOfWork, ids: list[uuid.UUID]) -> int:
        doomed = decide_retire(uow.conn, lock_skip_locked(uow.conn, ids))
        return sql.set_retired(uow.conn, doomed, now) if doomed else 0

    def delete(uow: UnitOfWork, ids: list[uuid.UUID]) -> int:
        doomed = decide_delete(uow.conn, lock_skip_locked(uow.conn, ids))
        if not doomed:
            return 0
        if policy.include_attached:
            # D10: the file rows are locked; their attachment rows go in the same transaction, the message
            # stays (docs/decisions.md "Retention and attached files").
            messages_sql.detach_files(uow.conn, doomed)
        return len(mark_deleted(uow, doomed, now, via="retention"))

    name = f"retention.{policy.name}"
    return [
        CandidateStep(
            "retire",
            "retired",
            [
                lambda conn, cursor, limit: sql.retire_candidates(
                    conn, policy.purpose, now - policy.max_age, policy.include_attached, cursor, limit
                )
            ],
            decide_retire,
            isolated(rt.db, name, retire, event="retention.candidate_failed", policy=policy.name),
        ),
        CandidateStep(
            "delete",
            "deleted",
            [
                lambda conn, cursor, limit: sql.retired_candidates(
                    conn, policy.purpose, now - policy.grace, cursor, limit
                )
            ],
            decide_delete,
            isolated(rt.db, name, delete, event="retention.candidate_failed", policy=policy.name),
        ),
    ]


def run_policy(rt: Runtime, policy: Policy, dry_run: bool = False, force: bool = False) -> PolicyReport:
    """Run one policy now, unless another runner of the same policy is at it (D19).

    The cadence gate counts only runs that finished: a run whose step failed is not recorded, so the next
    trigger (the actor's retry, the next schedule) runs it again instead of waiting min_interval. For a
    deletion policy, "later" is the failure (docs/decisions.md).

    Args:
        dry_run: count what would be retired and deleted; change nothing, record no run.
        force: ignore the cadence gate (a real run is still recorded). schedule.dev_fast does the same.

    Returns:
        The report; `ran` is False when the gate or another runner skipped the run (`skipped_reason` says
        which: `min_interval`, `busy`); `first_error` holds the error that ended a step (the actor raises it).
    """
    with (
        tracing.span("retention.run", policy=policy.name, dry_run=dry_run),
        rt.db.maintenance(),
        exclusive(rt.db, f"retention:{policy.name}") as mine,
    ):
        if not mine:
            log_event(log, "info", "retention.busy", "another runner is running this policy", policy=policy.name)
            tracing.count(skipped="busy")
            return PolicyReport(policy=policy.name, ran=False, dry_run=dry_run, skipped_reason="busy")
        report = _run_policy_alone(rt, policy, dry_run, force)
        tracing.count(ran=report.ran, skipped=report.skipped_reason, **{s.name: s.acted for s in report.steps})
        return report


def _run_policy_alone(rt: Runtime, policy: Policy, dry_run: bool, force: bool) -> PolicyReport:
    now = rt.clock.now()  # read once
    report = PolicyReport(policy=policy.name, ran=True, dry_run=dry_run)
    gate = None if (force or rt.lifecycle.dev_fast) else policy.min_interval
    report.last_run_at = rt.db.read(lambda conn: sql.last_run(conn, policy.run_name))
    if not gate_open(report.last_run_at, now, gate):
        report.ran = False
        report.skipped_reason = "min_interval"
        if not dry_run:
            metrics.RETENTION_SKIPPED.labels(policy.name).inc()
        log_event(
            log,
            "info",
            "retention.skipped",
            "retention run skipped: within min_interval of the last run",
            policy=policy.name,
            dry_run=dry_run,
        )
        return report
    for step in _steps(rt, policy, now):
        step_report = StepReport(step.letter, step.name)
        started = time.monotonic()
        try:
            run_candidates(rt.db, step, step_report, rt.lifecycle.batch_size, dry_run)
        except psycopg.Error as exc:
            step_report.error = report.error = type(exc).__name__
            report.first_error = exc
            log_event(
                log,
                "warning",
                "retention.step_failed",
                "retention step ended early; the run is not recorded and runs again",
                policy=policy.name,
                step=step.letter,
                error=type(exc).__name__,
            )
        step_report.duration_s = round(time.monotonic() - started, 4)
        report.steps.append(step_report)
        if not dry_run:
            metrics.RETENTION_FILES.labels(policy.name, step.name).inc(step_report.acted)
        if report.error:
            break  # retiring failed: deleting waits for the next run
    if not dry_run and report.first_error is None:
        # Only a finished run counts for the gate (D19).
        rt.db.unit_of_work(lambda uow: sql.record_run(uow.conn, policy.run_name, now), name="retention.record")
        metrics.RETENTION_LAST_RUN.labels(policy.name).set(now.timestamp())
    log_event(
        log,
        "info",
        "retention.ran",
        "retention policy ran",
        policy=policy.name,
        dry_run=dry_run,
        retired=report.count("retired"),
        deleted=report.count("deleted"),
        failed=sum(s.failed for s in report.steps),
        error=report.error,
    )
    return report


def policy_named(rt: Runtime, name: str) -> Policy:
    """The configured policy of that name.

    Raises:
        NotFound: no policy has that name (a schedule for a policy removed since it was sent).
    """
    for policy in rt.cfg.retention.policies:
        if policy.name == name:
            return policy
    raise NotFound("no retention policy of that name")


def restore_file(rt: Runtime, principal: Principal | None, file_id: uuid.UUID) -> FileRow:
    """Bring a retired file back (`manage`; principal None: an operator's command); its age starts again now.

    Returns:
        The file's row as restored.

    Raises:
        Forbidden: the caller lacks `manage`. NotFound: no such file. Conflict: `file_deleted` (already
            marked deleted: it cannot come back) or `file_not_retired`.
    """
    if principal is not None and not access.may_restore(principal):
        raise Forbidden("manage")

    def work(uow: UnitOfWork) -> FileRow:
        row = files_sql.lock_file(uow.conn, file_id)
        if row is None:
            raise NotFound()
        if row.deleted_at is not None:
            raise Conflict("file_deleted", "The file is already deleted; it cannot be restored.")
        if row.retired_at is None:
            raise Conflict("file_not_retired", "The file is not retired.")
        sql.restore(uow.conn, file_id, rt.clock.now())
        restored = files_sql.file_by_id(uow.conn, file_id)
        assert restored is not None  # locked above
        return restored

    row = rt.db.unit_of_work(work, name="retention.restore")
    log_event(log, "info", "retention.restored", "retired file restored", file_id=str(file_id))
    return row
