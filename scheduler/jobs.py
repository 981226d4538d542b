"""Every schedule of the scheduler role, in one place (D1, D9; STYLE.md: one register_jobs()).

Two scheduler replicas are safe: only the holder of a PostgreSQL advisory lock (the leader) emits the
cleanup, retention and sweep triggers and relays the outbox; the other tries to take the lock at every tick.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

import dramatiq
import psycopg
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from app.db import cleanup as cleanup_sql
from app.domain.retention import DEV_FAST_INTERVAL
from app.lifecycle import journal, restore
from app.lifecycle.journal import RestoreGuard
from app.platform import jobs, tracing
from app.platform.config.entries import cron_trigger
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.db.pool import Database
    from app.platform.config.tree import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.scheduler")


class Leading(Protocol):
    """What a periodic job asks of the leadership: whether this process leads now (never raises)."""

    def is_leader(self) -> bool: ...


class Leadership:
    """The scheduler's leader lock: a session-level advisory lock on a connection of its own.

    The session is bounded on the server: `idle_session_timeout` is `schedule.leader_timeout`, and the leader
    pings every third of it (register_jobs). A leader that is partitioned from PostgreSQL, or killed while
    partitioned, goes silent; the server ends its session, the lock goes with it, and a standby takes it at
    its next try: a standby leads at most about leader_timeout + leader_timeout / 3 after the leader was lost,
    not after the server's TCP keepalive (2 hours by default). The leader's own pings are bounded too
    (database.statement_timeout): a partitioned leader stops leading on its side as well.
    """

    def __init__(self, db: Database, timeout_s: float = 30.0, direct_url: str = "") -> None:
        self.db = db
        self.timeout_s = timeout_s
        self.direct_url = direct_url  # schedule.database_url: past a transaction pooler
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def is_leader(self) -> bool:
        """Ping the session when leading; otherwise try to take the lock. Never raises."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("SELECT 1")
                    return True
                except Exception as exc:
                    log_event(
                        log,
                        "warning",
                        "scheduler.leader_lost",
                        "scheduler lost its leader session",
                        error=type(exc).__name__,
                    )
                    self._drop()
            try:
                conn = self.db.connect(self.direct_url or None)
            except Exception as exc:
                log_event(
                    log,
                    "warning",
                    "scheduler.database_unavailable",
                    "scheduler cannot reach the database",
                    error=type(exc).__name__,
                )
                return False
            try:
                conn.execute(
                    "SELECT set_config('idle_session_timeout', %s, false)", (f"{int(self.timeout_s * 1000)}ms",)
                )
                locked = cleanup_sql.try_lock(conn, cleanup_sql.SCHEDULER_LOCK_KEY)
            except Exception as exc:
                log_event(
                    log,
                    "warning",
                    "scheduler.database_unavailable",
                    "scheduler cannot reach the database",
                    error=type(exc).__name__,
                )
                locked = False
            if not locked:
                conn.close()
                return False
            self._conn = conn
            log_event(log, "info", "scheduler.leader", "scheduler is the leader")
            return True

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def release(self) -> None:
        with self._lock:
            if self._conn is not None and not self._conn.closed:
                try:
                    cleanup_sql.unlock(self._conn, cleanup_sql.SCHEDULER_LOCK_KEY)
                except Exception:
                    pass
            self._drop()


def keep_leadership(leadership: Leading) -> bool:
    """The leader's ping (inside idle_session_timeout), and a standby's try to lead."""
    return leadership.is_leader()


def send_job(
    runtime: Runtime,
    leadership: Leading,
    queue_name: str,
    actor_name: str,
    *args: str,
    event: str = "scheduler.triggered",
) -> bool:
    """Send one message to the workers when this scheduler leads. A trigger commits with no change, so it
    goes straight to the broker, not through the outbox; a lost trigger is made good by the next one."""
    if not leadership.is_leader():
        return False
    try:
        runtime.broker.enqueue(
            dramatiq.Message(queue_name=queue_name, actor_name=actor_name, args=args, kwargs={}, options={})
        )
    except Exception as exc:
        log_event(
            log, "warning", "scheduler.trigger_failed", "trigger not sent", actor=actor_name, error=type(exc).__name__
        )
        return False
    log_event(log, "info", event, "job triggered", actor=actor_name)
    return True


def trigger_cleanup(runtime: Runtime, leadership: Leading) -> bool:
    """Send one cleanup_pending message (the worker's advisory lock keeps runs apart)."""
    return send_job(runtime, leadership, jobs.CLEANUP_QUEUE, jobs.CLEANUP_ACTOR, event="scheduler.cleanup_triggered")


def schedule_trigger(cfg: Config, cron: str) -> BaseTrigger:
    """The trigger of a retention policy or a sweep: its cron in schedule.timezone, or every 5 minutes
    under schedule.dev_fast (seed 003 5.3)."""
    if cfg.schedule.dev_fast:
        return IntervalTrigger(seconds=DEV_FAST_INTERVAL.total_seconds(), timezone=ZoneInfo(cfg.schedule.timezone))
    return cron_trigger(cron, ZoneInfo(cfg.schedule.timezone))


def relay_outbox(runtime: Runtime, leadership: Leading | None = None) -> int:
    """Publish outbox rows left behind and report the outbox depth."""
    if leadership is not None and not leadership.is_leader():
        return 0
    try:
        relayed = runtime.outbox.relay(older_than=runtime.cfg.outbox.relay_age)
        if relayed:
            metrics.OUTBOX_RELAYED.inc(relayed)
        metrics.OUTBOX_DEPTH.set(runtime.outbox.depth())
    except Exception as exc:
        log_event(
            log,
            "warning",
            "scheduler.database_unavailable",
            "scheduler cannot reach the database",
            job="outbox.relay",
            error=type(exc).__name__,
        )
        return 0
    return relayed


def journal_tick(runtime: Runtime, leadership: Leading, guard: RestoreGuard) -> int:
    """The leader's part of the journal. Every process writes the entries it committed right after the commit; the
    leader catches up what a dead process left, removes spool objects whose entries are written, reports the age
    of the oldest entry still waiting, and after a restore applies the journal again (journal.auto_reconcile;
    else it waits for `lethe restore reconcile`). A database older than its journal beside exactly one other
    installation's journal adopts it first. Segments past journal.retention go once an hour."""
    if not runtime.cfg.journal.enabled or not leadership.is_leader():
        return 0
    try:
        state = guard.refresh()
        if state is not None and state.reason is not None and state.damaged is None:
            if not runtime.cfg.journal.auto_reconcile:
                return 0
            if state.adoptable:
                if len(state.adoptable) != 1:
                    return 0  # several candidates: the operator says which (lethe restore adopt)
                journal.adopt(runtime, uuid.UUID(state.adoptable[0]))
                guard.refresh()
            restore.reconcile(runtime)
            guard.refresh()
        elif state is not None and state.damaged is not None:
            return 0  # said once by the guard; the operator mends it (docs/operations.md, 'A damaged journal')
        try:
            written = journal.flush(runtime)
            journal.settle_spool(runtime)
        finally:  # what waits is said even when the store refuses the write (that is when it matters)
            metrics.JOURNAL_OLDEST_PENDING.set(journal.oldest_pending_age(runtime))
            metrics.JOURNAL_PENDING.set(journal.pending(runtime))
        if time.monotonic() - _PRUNED[0] > 3600:
            _PRUNED[0] = time.monotonic()
            journal.prune(runtime)
        return written
    except restore.JournalDamaged:
        guard.refresh()
        return 0
    except Exception as exc:
        log_event(
            log,
            "warning",
            "journal.tick_failed",
            "the journal tick failed; the next one tries again",
            error=type(exc).__name__,
        )
        return 0


_PRUNED = [float("-inf")]


def register_jobs(scheduler: BaseScheduler, runtime: Runtime, leadership: Leadership | None = None) -> Leadership:
    """Add every periodic job to an APScheduler scheduler; returns the leadership it uses."""
    leader_timeout = runtime.cfg.schedule.leader_timeout.total_seconds()
    leadership = leadership or Leadership(
        runtime.db, timeout_s=leader_timeout, direct_url=runtime.cfg.schedule.database_url
    )
    start = runtime.clock.now()
    scheduler.add_job(
        keep_leadership,
        "interval",
        args=[leadership],
        id="leader.keepalive",
        seconds=leader_timeout / 3,
        max_instances=1,
        coalesce=True,
        next_run_time=start,
    )
    scheduler.add_job(
        relay_outbox,
        "interval",
        args=[runtime, leadership],
        id="outbox.relay",
        seconds=runtime.cfg.outbox.relay_interval.total_seconds(),
        max_instances=1,
        coalesce=True,
        next_run_time=start,
    )
    scheduler.add_job(
        journal_tick,
        "interval",
        args=[runtime, leadership, RestoreGuard(runtime)],
        id="journal.tick",
        seconds=runtime.cfg.outbox.relay_interval.total_seconds(),
        max_instances=1,
        coalesce=True,
        next_run_time=start,
    )
    # D8: every file.gc_interval, and once at start.
    scheduler.add_job(
        tracing.wrap(trigger_cleanup, "scheduler.cleanup"),
        "interval",
        args=[runtime, leadership],
        id="cleanup.trigger",
        seconds=runtime.cfg.file.gc_interval.total_seconds(),
        max_instances=1,
        coalesce=True,
        next_run_time=start,
    )
    # D16: each retention policy and each unmanaged prefix on its own schedule, sent to the workers by the
    # leader only; the cadence gate lives in PostgreSQL (schedule_runs), not here.
    # Under dev_fast they also run once at start, so a developer sees them work at once.
    first = {"next_run_time": start} if runtime.cfg.schedule.dev_fast else {}
    for policy in runtime.cfg.retention.policies:
        scheduler.add_job(
            tracing.wrap(send_job, "scheduler.retention"),
            schedule_trigger(runtime.cfg, policy.schedule),
            args=[runtime, leadership, jobs.RETENTION_QUEUE, jobs.RETENTION_ACTOR, policy.name],
            id=f"retention.{policy.name}",
            max_instances=1,
            coalesce=True,
            **first,
        )
    for unmanaged in runtime.cfg.storage.unmanaged_prefixes:
        scheduler.add_job(
            tracing.wrap(send_job, "scheduler.sweep"),
            schedule_trigger(runtime.cfg, unmanaged.schedule),
            args=[runtime, leadership, jobs.SWEEP_QUEUE, jobs.SWEEP_ACTOR, unmanaged.prefix],
            id=f"sweep.{unmanaged.prefix}",
            max_instances=1,
            coalesce=True,
            **first,
        )
    return leadership
