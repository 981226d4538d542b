# The cleanup deletes what nobody deleted by hand. It runs alone in the cluster (an advisory lock), reads
# the clock once, and runs its steps in order. Each step reads candidates by (time, id) in batches of
# file.gc_batch_size; every candidate is re-checked under its row lock with the pure rules of
# app/domain/ages.py before anything is marked. Deleting goes through mark_deleted (D5) only. One failing
# candidate never undoes the others (a savepoint each when a batch fails); a database error ends only its
# step, and the run reports the first error after the last step (D8).
"""cleanup_pending (D8): steps a to n as values, one runner, and its dry run.

A step over candidates is a small value: `page` reads a batch by (time, id) after a cursor, `decide` says
which of a batch's ids the step acts on now (read-only, so the dry run calls it alone and cannot drift from
the real path), and `act` does it; steps a to c act in one unit of work per batch, locking first and
calling their own `decide` again under the lock. Steps e to g have no candidates: they run once.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

import psycopg

from app.platform.observability import metrics
from app.db import cleanup as sql
from app.db import purge_failures as failures_sql
from app.db import aborts as aborts_sql
from app.db import erasures as erasures_sql
from app.db import files as files_sql
from app.db import holds as holds_sql
from app.db import keeps as keeps_sql
from app.db import messages as messages_sql
from app.db import receipts as receipts_sql
from app.db import scans as scans_sql
from app.db import slots as slots_sql
from app.db import vacuum as vacuum_sql
from app.db import webhooks as webhooks_sql
from app.db.conn import Conn
from app.db.locks import exclusive
from app.db.uow import UnitOfWork
from app.lifecycle.batches import CandidateStep, Outcome, Page, StepReport, isolated, run_candidates
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.erasure import erase_round
from app.domain.ages import (CleanupFacts, failed_row_expired, pending_scan_action, session_expired, unattached_expired,
                             unheld_expired)
from app.domain.ends import Clearance, Scope
from app.errors import ObjectFailed, StorageError
from app.db.events import write_files_updated
from app.platform.jobs import enqueue_purge, enqueue_scan
from app.lifecycle import webhooks
from app.lifecycle.purge import purge_files
from app.platform.observability.logs import log_event
from app.storage.base import MultipartRef

if TYPE_CHECKING:  # the services' collaborators (issue 22: typed at every service boundary)
    from app.platform.runtime import Runtime

log = logging.getLogger("lethe.cleanup")


@dataclass(frozen=True)
class CleanupPolicy:
    """The limits the cleanup works by, built once from the configuration."""

    batch_size: int
    unattached_ttl: timedelta
    failed_row_ttl: timedelta
    tmp_ttl: timedelta
    object_delete_delay: timedelta
    receipt_ttl: timedelta
    scan_pending_ttl: timedelta
    message_tombstone_ttl: timedelta
    direct_abort_delay: timedelta = timedelta(minutes=1)
    webhook_lost_after: timedelta = timedelta(minutes=15)
    webhook_ttl: timedelta = timedelta(days=7)

    @classmethod
    def from_config(cls, cfg) -> "CleanupPolicy":
        return cls(batch_size=cfg.file.gc_batch_size, unattached_ttl=cfg.file.unattached_ttl,
                   failed_row_ttl=cfg.file.failed_row_ttl, tmp_ttl=cfg.file.upload_session_ttl,
                   object_delete_delay=cfg.privacy.object_delete_delay, receipt_ttl=cfg.privacy.receipt_ttl,
                   scan_pending_ttl=cfg.scan.pending_ttl,
                   message_tombstone_ttl=cfg.privacy.message_tombstone_ttl,
                   direct_abort_delay=cfg.file.direct_abort_delay, webhook_lost_after=cfg.file.gc_interval,
                   webhook_ttl=cfg.webhooks.delivery_ttl)


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


@dataclass(frozen=True)
class WholeStep:
    """A step without candidates, run once: `run(report, dry_run)`."""

    letter: str
    name: str
    run: Callable[[StepReport, bool], None]


def _facts(row) -> CleanupFacts:
    return CleanupFacts(purpose=row.purpose, upload_state=row.upload_state, scan_status=row.scan_status,
                        created_at=row.created_at, deleted=row.deleted, attached=row.attached,
                        scanned_at=row.scanned_at, session_state=row.session_state,
                        completed_at=row.completed_at, expires_at=row.expires_at)


class Steps:
    """Steps a to f for one run: the database, the store, the policy and the time of the run."""

    def __init__(self, rt: Runtime, policy: CleanupPolicy, now: datetime):
        self.rt, self.db = rt, rt.db
        self.policy, self.now = policy, now

    def all(self) -> list[CandidateStep | WholeStep]:
        unattached_cutoff = self.now - self.policy.unattached_ttl
        failed_cutoff = self.now - self.policy.failed_row_ttl
        return [
            CandidateStep("a", "expired_sessions",
                          [lambda conn, cursor, limit: sql.expired_sessions(conn, self.now, cursor, limit)],
                          self._expiring, self._in_unit_of_work("a", self._expire)),
            self._deleting("b", "never_attached",
                           lambda conn, cursor, limit: sql.unattached_candidates(conn, unattached_cutoff, cursor, limit),
                           lambda facts: unattached_expired(facts, self.now, self.policy.unattached_ttl),
                           own_drafts_protect=True, via="cleanup_unattached"),
            self._deleting("c", "failed_rows",
                           lambda conn, cursor, limit: sql.failed_candidates(conn, failed_cutoff, cursor, limit),
                           lambda facts: failed_row_expired(facts, self.now, self.policy.failed_row_ttl),
                           own_drafts_protect=False, via="cleanup_failed"),
            # d: deleted rows first, then live rows whose refused objects are due again (D7), then live rows
            # that are final and not deliverable whose objects no purge removed yet (a lost job, D19). Inline,
            # no new job: an outage piles up no jobs. A store-wide error ends the step; a refused file is skipped.
            CandidateStep("d", "catch_up",
                          [lambda conn, cursor, limit: sql.deleted_rows(conn, self.now, cursor, limit),
                           lambda conn, cursor, limit: sql.due_refused_live(conn, self.now, cursor, limit),
                           lambda conn, cursor, limit: sql.objects_due_live(conn, cursor, limit)],
                          lambda conn, ids: list(ids), self._purge),
            WholeStep("e", "temporary_files", self._temporary_files),
            WholeStep("f", "backlog", self._backlog),
            WholeStep("g", "old_receipts", self._old_receipts),  # and released legal holds (issue 27)
            CandidateStep("h", "unheld_slot_files",
                          [lambda conn, cursor, limit: slots_sql.unheld_candidates(conn, unattached_cutoff, cursor,
                                                                                  limit)],
                          self._unheld, self._in_unit_of_work("h", self._release_unheld)),
            WholeStep("i", "running_erasures", self._running_erasures),
            CandidateStep("j", "pending_scans",
                          [lambda conn, cursor, limit: sql.pending_scans(conn, self.now - self.policy.scan_pending_ttl,
                                                                         cursor, limit)],
                          self._pending_decide, self._in_unit_of_work("j", self._drive_pending)),
            WholeStep("k", "gauges", self._gauges),
            WholeStep("l", "message_tombstones", self._old_tombstones),
            WholeStep("m", "multipart_aborts", self._multipart_aborts),
            WholeStep("n", "webhooks", self._webhooks),
        ]

    # -- a: expired sessions ----------------------------------------------------------------------------------

    def _expiring(self, conn: psycopg.Connection, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return [row.file_id for row in sql.open_sessions(conn, file_ids)
                if session_expired(row.state, row.expires_at, self.now)]

    def _expire(self, uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # D10 expiry lock order: the files (skipping rows another transaction holds), then their sessions.
        locked = sql.lock_skip_locked(uow.conn, file_ids)
        expired = [row.file_id for row in sql.lock_open_sessions(uow.conn, locked)
                   if session_expired(row.state, row.expires_at, self.now)]
        if expired:
            sql.expire_sessions(uow.conn, expired)
            write_files_updated(uow, expired, None, self.now)  # a job writes no actor
            enqueue_purge(uow, expired)  # D7: final and not deliverable; parts and the multipart upload go
        return len(expired)

    # -- b and c: deleting never attached, failed and blocked files -------------------------------------------

    def _deleting(self, letter: str, name: str, page: Page, rule: Callable[[CleanupFacts], bool],
                  own_drafts_protect: bool, via: str) -> CandidateStep:
        def decide(conn: psycopg.Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
            eligible = [row for row in sql.cleanup_facts(conn, ids) if rule(_facts(row))]
            protected = sql.protected_by_own_drafts(conn, [(row.id, row.uploaded_by) for row in eligible]) \
                if own_drafts_protect else set()
            return [row.id for row in eligible if row.id not in protected]

        def act(uow: UnitOfWork, ids: list[uuid.UUID]) -> int:
            # Lock first (ascending id, skipping rows an attach or a delete holds), then re-check in fresh
            # statements: an attachment committed before our lock is seen (D10).
            doomed = decide(uow.conn, sql.lock_skip_locked(uow.conn, ids))
            return len(mark_deleted(uow, doomed, self.now, via)) if doomed else 0

        return CandidateStep(letter, name, [page], decide, self._in_unit_of_work(letter, act))

    def _in_unit_of_work(self, letter: str, work: Callable[[UnitOfWork, list[uuid.UUID]], int]):
        return isolated(self.db, f"cleanup.{letter}", work, event="cleanup.candidate_failed", step=letter)

    # -- d: catch-up of lost purges ---------------------------------------------------------------------------

    def _purge(self, ids: list[uuid.UUID]) -> Outcome:
        purged = purge_files(self.rt, ids)
        return Outcome(acted=purged.results["row"] + purged.results["objects"],
                       kept=sum(purged.results[why] for why in ("kept_attached", "kept_slot", "kept_live",
                                                                "row_refused", "bad_key", "held")),
                       failed=purged.results["refused"])

    # -- e: temporary files -----------------------------------------------------------------------------------

    def _temporary_files(self, report: StepReport, dry_run: bool) -> None:
        removed = self.rt.maintenance.sweep_tmp(self.now - self.policy.tmp_ttl, dry_run=dry_run)
        report.candidates = report.acted = removed

    # -- i: erasures whose jobs ran out of retries (D16) ------------------------------------------------------

    def _running_erasures(self, report: StepReport, dry_run: bool) -> None:
        running = self.db.read(erasures_sql.running_ids)
        report.candidates = len(running)
        if dry_run:
            return
        for erasure_id in running:
            if erase_round(self.rt, erasure_id) != "running":
                report.acted += 1

    # -- j: scans that never came back (D19): sent again once, then ended as error -----------------------------

    def _pending_actions(self, conn: psycopg.Connection, file_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
        actions = {row.id: pending_scan_action(row.upload_state, row.scan_status, row.deleted, row.last_change_at,
                                               row.scan_resent_at, self.now, self.policy.scan_pending_ttl)
                   for row in sql.pending_scan_facts(conn, file_ids)}
        return {file_id: action for file_id, action in actions.items() if action is not None}

    def _pending_decide(self, conn: psycopg.Connection, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return list(self._pending_actions(conn, file_ids))

    def _drive_pending(self, uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock first (skipping rows a scan's record holds), then decide in fresh statements: a scan that
        # recorded its outcome before our lock is seen and left alone.
        actions = self._pending_actions(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        resend = [file_id for file_id, action in actions.items() if action == "resend"]
        if resend:
            sql.set_scan_resent(uow.conn, resend, self.now)
            for file_id in resend:
                enqueue_scan(uow, file_id)
            log_event(log, "warning", "scan.resent", "scans still pending past scan.pending_ttl were sent again",
                      count=len(resend))
        for file_id, action in actions.items():
            if action == "end" and scans_sql.record_outcome(uow, file_id, "error", self.now) is not None:
                log_event(log, "warning", "scan.abandoned", "a scan never came back; the file ends as error and "
                          "is purged", file_id=str(file_id), reason="pending_ttl")
        return len(actions)

    # -- k: gauges of what could stay: pending scans (D19), dead tuples until VACUUM (issue 20) ---------------

    def _gauges(self, report: StepReport, dry_run: bool) -> None:
        row = self.db.read(sql.pending_summary)
        report.candidates = row.n
        if dry_run:
            return
        count_gauge, oldest_gauge = metrics.scan_pending_gauges()
        count_gauge.set(row.n)
        oldest_gauge.set(max((self.now - row.oldest).total_seconds(), 0.0) if row.oldest is not None else 0.0)
        for table, dead in self.db.read(vacuum_sql.dead_tuples).items():
            metrics.dead_tuples_gauge().labels(table).set(dead)

    # -- h: avatars and logos no slot holds (D16) -------------------------------------------------------------

    def _unheld(self, conn: psycopg.Connection, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        held = slots_sql.held(conn, file_ids)
        return [row.id for row in files_sql.files_by_ids(conn, file_ids)
                if unheld_expired(row.purpose, row.upload_state, row.deleted_at is not None, row.id in held,
                                  row.last_change_at,
                                  self.now, self.policy.unattached_ttl)]

    def _release_unheld(self, uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # Lock the files first (skipping rows a slot change holds), then read the slots afresh: a file set into
        # a slot before our lock is seen held and kept.
        doomed = self._unheld(uow.conn, sql.lock_skip_locked(uow.conn, file_ids))
        return len(mark_deleted(uow, doomed, self.now, "cleanup_unheld")) if doomed else 0

    # -- g: receipts past privacy.receipt_ttl (D16) ----------------------------------------------------------

    def _old_receipts(self, report: StepReport, dry_run: bool) -> None:
        cutoff = self.now - self.policy.receipt_ttl
        self._delete_in_batches(report, dry_run, "cleanup.g", lambda conn: receipts_sql.count_expired(conn, cutoff),
                                lambda conn, limit: receipts_sql.delete_expired(conn, cutoff, limit))
        # Released legal holds are name-free records kept as long as the receipts (issue 27).
        self._delete_in_batches(report, dry_run, "cleanup.g", lambda conn: holds_sql.count_released(conn, cutoff),
                                lambda conn, limit: holds_sql.delete_released(conn, cutoff, limit))

    def _delete_in_batches(self, report: StepReport, dry_run: bool, name: str, count: Callable[[Conn], int],
                           delete: Callable[[Conn, int], int]) -> None:
        """Steps g, l and n: rows past a cutoff go in batches of file.gc_batch_size, one unit of work each, until a
        batch comes back smaller (STYLE.md); the dry run counts them."""
        if dry_run:
            counted = self.db.read(count)
            report.candidates += counted
            report.acted += counted
            return
        while True:
            removed = self.db.unit_of_work(lambda uow: delete(uow.conn, self.policy.batch_size), name=name)
            report.candidates += removed
            report.acted += removed
            report.batches += 1
            if removed < self.policy.batch_size:
                return

    # -- l: tombstones of deleted messages past privacy.message_tombstone_ttl (issue 21) -------------------

    def _old_tombstones(self, report: StepReport, dry_run: bool) -> None:
        cutoff = self.now - self.policy.message_tombstone_ttl
        self._delete_in_batches(report, dry_run, "cleanup.l",
                                lambda conn: messages_sql.count_old_tombstones(conn, cutoff),
                                lambda conn, limit: messages_sql.delete_old_tombstones(conn, cutoff, limit))

    # -- m: direct uploads aborted again and confirmed gone (issue 26) ------------------------------------------

    def _multipart_aborts(self, report: StepReport, dry_run: bool) -> None:
        """A part PUT in flight while AbortMultipartUpload ran may still land (AWS: abort again). Every abort of a
        direct upload older than file.direct_abort_delay is repeated, then the uploads of its key are listed
        (that key only); a row goes once none is listed, else every listed upload of the key is aborted and the
        row waits for the next run. A store-wide error ends the step."""
        before = self.now - self.policy.direct_abort_delay
        cursor: tuple[datetime, str] | None = None
        while True:
            rows = self.db.read(lambda conn: aborts_sql.due(conn, before, cursor, self.policy.batch_size))
            report.candidates += len(rows)
            report.batches += 1
            if rows and not dry_run:
                gone: list[str] = []
                left: list[str] = []
                cleared = self.db.unit_of_work(
                    lambda uow: keeps_sql.clearance(uow.conn, [row.file_id for row in rows], Scope.FILE, self.now),
                    name="cleanup.m")
                for row in rows:
                    try:
                        (left if self._abort_again(cleared, row) else gone).append(row.upload_id)
                    except ObjectFailed:  # this upload refused: the others go on, it is tried at the next run
                        report.failed += 1
                if gone:
                    self.db.unit_of_work(lambda uow: aborts_sql.confirmed(uow.conn, gone), name="cleanup.m")
                if left:
                    self.db.unit_of_work(lambda uow: aborts_sql.again(uow.conn, left), name="cleanup.m")
                    log_event(log, "warning", "cleanup.uploads_left", "aborted direct uploads were still listed; "
                              "aborted again, confirmed at the next run", count=len(left))
                report.acted += len(gone)
                report.kept += len(left)
            if len(rows) < self.policy.batch_size:
                return
            cursor = (rows[-1].first_aborted_at, rows[-1].upload_id)

    def _abort_again(self, cleared: Clearance, row) -> bool:
        """Abort once more, then list the key's uploads and abort each (as the one rule allows: a legal hold
        keeps them): True when any was still listed, or kept."""
        if row.file_id not in cleared:
            return True
        self.rt.files.abort_uploads(cleared, {row.file_id: [MultipartRef(str(row.file_id), row.object_key,
                                                                        row.upload_id)]})
        listed = self.rt.store.uploads_of(row.object_key)
        self.rt.files.abort_uploads(cleared, {row.file_id: [MultipartRef(str(row.file_id), row.object_key, upload_id)
                                                            for upload_id in listed]})
        return bool(listed)

    # -- n: webhook deliveries whose job was lost, and old delivery rows (issue 28) ------------------------------

    def _webhooks(self, report: StepReport, dry_run: bool) -> None:
        """Pending deliveries due more than one cleanup interval ago are sent again (their job was lost; a
        receiver may see a message twice, with the same webhook-id); rows older than webhooks.delivery_ttl go."""
        lost = webhooks.catch_up(self.rt, self.now, self.policy.webhook_lost_after, self.policy.batch_size, dry_run)
        report.candidates += lost
        report.acted += lost
        cutoff = self.now - self.policy.webhook_ttl
        self._delete_in_batches(report, dry_run, "cleanup.n", lambda conn: webhooks_sql.count_old(conn, cutoff),
                                lambda conn, limit: webhooks_sql.delete_old(conn, cutoff, limit))

    # -- f: backlog -------------------------------------------------------------------------------------------

    def _backlog(self, report: StepReport, dry_run: bool) -> None:
        row = self.db.read(sql.backlog)
        refused = self.db.read(failures_sql.failing)
        report.candidates = row.n
        age = (self.now - row.oldest) if row.oldest is not None else timedelta(0)
        if not dry_run:
            count_gauge, oldest_gauge = metrics.purge_backlog_gauges()
            count_gauge.set(row.n)
            oldest_gauge.set(max(age.total_seconds(), 0.0))
            metrics.purge_failing_gauge().set(refused.n)
            held = self.db.read(holds_sql.summary)
            active_gauge, held_gauge = metrics.hold_gauges()
            active_gauge.set(held.active)
            held_gauge.set(held.files_held)
        if row.oldest is not None and age > self.policy.object_delete_delay:
            log_event(log, "warning", "cleanup.backlog_overdue", "purge backlog older than privacy.object_delete_delay",
                      count=row.n, refused=refused.n)


def run_cleanup(rt: Runtime, dry_run: bool = False, on_step: Callable[[StepReport], None] | None = None) -> CleanupReport:
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


def _run_locked(rt: Runtime, policy: CleanupPolicy, dry_run: bool,
                on_step: Callable[[StepReport], None] | None = None) -> CleanupReport:
    now = rt.clock.now()  # read once (D8)
    report = CleanupReport(ran=True, dry_run=dry_run, now=now)
    for step in Steps(rt, policy, now).all():
        step_report = StepReport(step.letter, step.name)
        started = time.monotonic()
        try:
            if isinstance(step, CandidateStep):
                run_candidates(rt.db, step, step_report, policy.batch_size, dry_run)
            else:
                step.run(step_report, dry_run)
        except (psycopg.Error, StorageError) as exc:
            step_report.error = type(exc).__name__
            report.first_error = report.first_error or exc
            log_event(log, "warning", "cleanup.step_failed", "cleanup step ended early", step=step.letter,
                      step_name=step.name, error=type(exc).__name__)
        step_report.duration_s = round(time.monotonic() - started, 4)
        report.steps.append(step_report)
        if on_step is not None:
            on_step(step_report)  # progress on a terminal (lethe cleanup)
        if not dry_run:
            metrics.CLEANUP_STEP_DURATION.labels(step.letter).observe(step_report.duration_s)
            for outcome in ("acted", "kept", "failed"):
                metrics.CLEANUP_FILES.labels(step.letter, outcome).inc(getattr(step_report, outcome))
        log_event(log, "info", "cleanup.step", "cleanup step", step=step.letter, step_name=step.name,
                  dry_run=dry_run, candidates=step_report.candidates, acted=step_report.acted,
                  kept=step_report.kept, failed=step_report.failed, batches=step_report.batches,
                  duration_s=step_report.duration_s)
    report.backlog = report.step("f").candidates
    if not dry_run:
        metrics.CLEANUP_RUNS.labels("failed" if report.first_error else "ok").inc()
    return report
