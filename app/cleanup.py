# The cleanup deletes what nobody deleted by hand. It runs alone in the cluster (an advisory lock), reads
# the clock once, and runs its steps in order. Each step reads candidates by (time, id) in batches of
# file.gc_batch_size; every candidate is re-checked under its row lock with the pure rules of
# app/domain/ages.py before anything is marked. Deleting goes through mark_deleted (D5) only. One failing
# candidate never undoes the others (a savepoint each when a batch fails); a database error ends only its
# step, and the run reports the first error after the last step (D8).
"""cleanup_pending (D8): steps a to f, and its dry run."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable, Iterator

import psycopg

from app import metrics
from app.db import cleanup as sql
from app.db import purge_failures as failures_sql
from app.deletion import mark_deleted
from app.domain.ages import CleanupFacts, failed_row_expired, session_expired, unattached_expired
from app.errors import StorageError
from app.events import write_files_updated
from app.jobs import enqueue_purge
from app.purge import purge_files

log = logging.getLogger("lethe.cleanup")


@dataclass
class StepReport:
    """What one step did (or, in a dry run, would do), as counts."""

    step: str
    name: str
    candidates: int = 0
    acted: int = 0
    kept: int = 0
    failed: int = 0
    batches: int = 0
    error: str | None = None
    duration_s: float = 0.0


@dataclass
class CleanupReport:
    ran: bool
    dry_run: bool = False
    now: datetime | None = None
    steps: list[StepReport] = field(default_factory=list)
    first_error: BaseException | None = None
    backlog: int | None = None

    def step(self, letter: str) -> StepReport:
        return next(s for s in self.steps if s.step == letter)


def _facts(row) -> CleanupFacts:
    return CleanupFacts(purpose=row.purpose, upload_state=row.upload_state, scan_status=row.scan_status,
                        created_at=row.created_at, deleted=row.deleted, attached=row.attached,
                        scanned_at=row.scanned_at, session_state=row.session_state,
                        completed_at=row.completed_at, expires_at=row.expires_at)


class _Run:
    def __init__(self, rt, now: datetime, dry_run: bool):
        self.rt = rt
        self.now = now
        self.dry_run = dry_run
        self.batch_size = rt.cfg.file.gc_batch_size
        self.ttl_unattached = timedelta(seconds=rt.cfg.file.unattached_ttl)
        self.ttl_failed = timedelta(seconds=rt.cfg.file.failed_row_ttl)

    def steps(self) -> list[tuple[str, str, Callable[[StepReport], None]]]:
        return [
            ("a", "expired_sessions", self.expired_sessions),
            ("b", "never_attached", self.never_attached),
            ("c", "failed_rows", self.failed_rows),
            ("d", "catch_up", self.catch_up),
            ("e", "temporary_files", self.temporary_files),
            ("f", "backlog", self.backlog),
        ]

    def _batches(self, report: StepReport, query) -> Iterator[list]:
        """Candidates in batches by (time, id), until a batch comes back smaller than the batch size."""
        cursor = None
        while True:
            rows = self.rt.db.read(lambda conn: query(conn, cursor, self.batch_size))
            if not rows:
                return
            report.batches += 1
            report.candidates += len(rows)
            yield rows
            if len(rows) < self.batch_size:
                return
            cursor = (rows[-1].at, rows[-1].id)

    # -- a: expired sessions ----------------------------------------------------------------------------------

    def expired_sessions(self, report: StepReport) -> None:
        for rows in self._batches(report, lambda conn, cursor, limit: sql.expired_sessions(conn, self.now, cursor, limit)):
            ids = [row.id for row in rows]
            if self.dry_run:
                report.acted += len(ids)
                continue
            acted, failed = self.rt.db.unit_of_work(lambda uow: self._in_savepoints(uow, report, ids, self._expire),
                                                    name="cleanup.a")
            report.acted += acted
            report.failed += failed
            report.kept += len(ids) - acted - failed

    def _expire(self, uow, file_ids: list[uuid.UUID]) -> int:
        # D10 expiry lock order: the files (skipping rows another transaction holds), then their sessions.
        locked = sql.lock_skip_locked(uow.conn, file_ids)
        expired = [row.file_id for row in sql.lock_open_sessions(uow.conn, locked)
                   if session_expired(row.state, row.expires_at, self.now)]
        if expired:
            sql.expire_sessions(uow.conn, expired)
            write_files_updated(uow, expired, None, self.now)  # a job writes no actor
            enqueue_purge(uow, expired)  # D7: final and not deliverable; parts and the multipart upload go
        return len(expired)

    def _in_savepoints(self, uow, report: StepReport, ids: list[uuid.UUID], work) -> tuple[int, int]:
        """Run work(uow, ids) for the batch in one savepoint; if it fails, once per candidate, each in a
        savepoint of its own, so that one failing candidate never undoes the others. Returns (acted, failed)."""
        try:
            with uow.savepoint():
                return work(uow, ids), 0
        except psycopg.OperationalError:
            raise
        except Exception:  # noqa: BLE001 - fall back to one candidate at a time
            pass
        acted = failed = 0
        for file_id in ids:
            try:
                with uow.savepoint():
                    acted += work(uow, [file_id])
            except psycopg.OperationalError:
                raise
            except Exception as exc:  # noqa: BLE001 - this candidate only
                failed += 1
                log.warning("cleanup candidate failed", extra={"event": "cleanup.candidate_failed",
                                                               "step": report.step, "file_id": str(file_id),
                                                               "error": type(exc).__name__})
        return acted, failed

    # -- b and c: deleting never attached, failed and blocked files -------------------------------------------

    def never_attached(self, report: StepReport) -> None:
        cutoff = self.now - self.ttl_unattached
        self._delete_step(report, lambda conn, cursor, limit: sql.unattached_candidates(conn, cutoff, cursor, limit),
                          lambda facts: unattached_expired(facts, self.now, self.ttl_unattached),
                          own_drafts_protect=True, via="cleanup_unattached")

    def failed_rows(self, report: StepReport) -> None:
        cutoff = self.now - self.ttl_failed
        self._delete_step(report, lambda conn, cursor, limit: sql.failed_candidates(conn, cutoff, cursor, limit),
                          lambda facts: failed_row_expired(facts, self.now, self.ttl_failed),
                          own_drafts_protect=False, via="cleanup_failed")

    def _delete_step(self, report: StepReport, query, rule, own_drafts_protect: bool, via: str) -> None:
        for rows in self._batches(report, query):
            ids = [row.id for row in rows]
            if self.dry_run:
                doomed = self.rt.db.read(lambda conn: self._doomed(conn, ids, rule, own_drafts_protect))
                report.acted += len(doomed)
                report.kept += len(ids) - len(doomed)
                continue
            acted, failed = self.rt.db.unit_of_work(
                lambda uow: self._delete_batch(uow, report, ids, rule, own_drafts_protect, via),
                name=f"cleanup.{report.step}")
            report.acted += acted
            report.failed += failed
            report.kept += len(ids) - acted - failed

    def _doomed(self, conn, ids, rule, own_drafts_protect: bool) -> list[uuid.UUID]:
        """Of candidate ids (locked, or read for a dry run), those the rule deletes now."""
        eligible = [row for row in sql.cleanup_facts(conn, ids) if rule(_facts(row))]
        protected = sql.protected_by_own_drafts(conn, [(row.id, row.uploaded_by) for row in eligible]) \
            if own_drafts_protect else set()
        return [row.id for row in eligible if row.id not in protected]

    def _delete_batch(self, uow, report: StepReport, ids, rule, own_drafts_protect: bool, via: str) -> tuple[int, int]:
        # Lock first (ascending id, skipping rows an attach or a delete holds), then re-check in fresh
        # statements: an attachment committed before our lock is seen (D10).
        locked = sql.lock_skip_locked(uow.conn, ids)
        doomed = self._doomed(uow.conn, locked, rule, own_drafts_protect)
        if not doomed:
            return 0, 0
        return self._in_savepoints(uow, report, doomed,
                                   lambda uow, file_ids: len(mark_deleted(uow, file_ids, self.now, via)))

    # -- d: catch-up of lost purges ---------------------------------------------------------------------------

    def catch_up(self, report: StepReport) -> None:
        # Deleted rows first, then live rows whose refused objects are due again (D7). Inline, no new job:
        # an outage piles up no jobs. A store-wide error ends this step; a refused file is only skipped.
        for query in (sql.deleted_rows, sql.due_refused_live):
            for rows in self._batches(report, lambda conn, cursor, limit: query(conn, self.now, cursor, limit)):
                if self.dry_run:
                    report.acted += len(rows)
                    continue
                purged = purge_files(self.rt, [row.id for row in rows])
                report.acted += purged.results["row"] + purged.results["objects"]
                report.kept += purged.results["kept_attached"] + purged.results["bad_key"]
                report.failed += purged.results["refused"]

    # -- e: temporary files -----------------------------------------------------------------------------------

    def temporary_files(self, report: StepReport) -> None:
        older_than = self.now - timedelta(seconds=self.rt.cfg.file.upload_session_ttl)
        removed = self.rt.store.sweep_tmp(older_than, dry_run=self.dry_run)
        report.candidates = report.acted = removed

    # -- f: backlog -------------------------------------------------------------------------------------------

    def backlog(self, report: StepReport) -> None:
        row = self.rt.db.read(sql.backlog)
        report.candidates = row.n
        age_s = (self.now - row.oldest).total_seconds() if row.oldest is not None else 0.0
        if not self.dry_run:
            count_gauge, oldest_gauge = metrics.purge_backlog_gauges()
            count_gauge.set(row.n)
            oldest_gauge.set(max(age_s, 0.0))
        refused = self.rt.db.read(failures_sql.failing)
        if not self.dry_run:
            metrics.purge_failing_gauge().set(refused.n)
        if row.oldest is not None and age_s > self.rt.cfg.privacy.object_delete_delay:
            log.warning("purge backlog older than privacy.object_delete_delay",
                        extra={"event": "cleanup.backlog_overdue", "count": row.n, "refused": refused.n})


def run_cleanup(rt, dry_run: bool = False) -> CleanupReport:
    """Run the cleanup once, unless another run holds the cluster-wide lock.

    Returns:
        The report; `first_error` holds the first error of a step (the caller raises it after logging).
    """
    with rt.db.pool.connection() as lock_conn:
        if not sql.try_lock(lock_conn, sql.CLEANUP_LOCK_KEY):
            log.info("cleanup already running elsewhere", extra={"event": "cleanup.busy"})
            metrics.CLEANUP_RUNS.labels("busy").inc()
            return CleanupReport(ran=False, dry_run=dry_run)
        try:
            return _run_locked(rt, dry_run)
        finally:
            sql.unlock(lock_conn, sql.CLEANUP_LOCK_KEY)


def _run_locked(rt, dry_run: bool) -> CleanupReport:
    now = rt.clock.now()  # read once (D8)
    run = _Run(rt, now, dry_run)
    report = CleanupReport(ran=True, dry_run=dry_run, now=now)
    for letter, name, step in run.steps():
        step_report = StepReport(letter, name)
        started = time.monotonic()
        try:
            step(step_report)
        except (psycopg.Error, StorageError) as exc:
            step_report.error = type(exc).__name__
            report.first_error = report.first_error or exc
            log.warning("cleanup step ended early", extra={"event": "cleanup.step_failed", "step": letter,
                                                          "step_name": name, "error": type(exc).__name__})
        step_report.duration_s = round(time.monotonic() - started, 4)
        report.steps.append(step_report)
        if not dry_run:
            metrics.CLEANUP_STEP_DURATION.labels(letter).observe(step_report.duration_s)
            for outcome in ("acted", "kept", "failed"):
                metrics.CLEANUP_FILES.labels(letter, outcome).inc(getattr(step_report, outcome))
        log.info("cleanup step", extra={"event": "cleanup.step", "step": letter, "step_name": name,
                                        "dry_run": dry_run, "candidates": step_report.candidates,
                                        "acted": step_report.acted, "kept": step_report.kept,
                                        "failed": step_report.failed, "batches": step_report.batches,
                                        "duration_s": step_report.duration_s})
    report.backlog = report.step("f").candidates
    if not dry_run:
        metrics.CLEANUP_RUNS.labels("failed" if report.first_error else "ok").inc()
    return report
