"""Every schedule of the scheduler role, in one place (D1, D9; STYLE.md: one register_jobs()).

Two scheduler replicas are safe: only the holder of a PostgreSQL advisory lock (the leader) emits the
cleanup trigger and relays the outbox; the other tries to take the lock at every tick.
"""

from __future__ import annotations

import logging
import threading

import dramatiq
from apscheduler.schedulers.base import BaseScheduler

from app import jobs, metrics
from app.db import cleanup as cleanup_sql
from app.logs import log_event

log = logging.getLogger("lethe.scheduler")


class Leadership:
    """The scheduler's leader lock: a session-level advisory lock on a connection kept for it."""

    def __init__(self, db):
        self.db = db
        self._conn = None
        self._lock = threading.Lock()

    def is_leader(self) -> bool:
        with self._lock:
            try:
                if self._conn is not None and not self._conn.closed:
                    self._conn.execute("SELECT 1")
                    return True
            except Exception:  # noqa: BLE001 - the connection died: the lock went with it
                self._release()
            conn = self.db.pool.getconn()
            if cleanup_sql.try_lock(conn, cleanup_sql.SCHEDULER_LOCK_KEY):
                self._conn = conn
                log_event(log, "info", "scheduler.leader", "scheduler is the leader")
                return True
            self.db.pool.putconn(conn)
            return False

    def _release(self) -> None:
        if self._conn is not None:
            try:
                self.db.pool.putconn(self._conn)
            except Exception:  # noqa: BLE001
                pass
            self._conn = None

    def release(self) -> None:
        with self._lock:
            if self._conn is not None and not self._conn.closed:
                try:
                    cleanup_sql.unlock(self._conn, cleanup_sql.SCHEDULER_LOCK_KEY)
                except Exception:  # noqa: BLE001
                    pass
            self._release()


def trigger_cleanup(runtime, leadership: Leadership) -> bool:
    """Send one cleanup_pending message (the worker's advisory lock keeps runs apart)."""
    if not leadership.is_leader():
        return False
    # A trigger commits with no change, so it goes straight to the broker, not through the outbox.
    try:
        runtime.broker.enqueue(dramatiq.Message(queue_name=jobs.CLEANUP_QUEUE, actor_name=jobs.CLEANUP_ACTOR,
                                                args=(), kwargs={}, options={}))
    except Exception as exc:  # noqa: BLE001 - the broker is down: the next interval tries again
        log_event(log, "warning", "scheduler.trigger_failed", "cleanup trigger not sent", error=type(exc).__name__)
        return False
    log_event(log, "info", "scheduler.cleanup_triggered", "cleanup triggered")
    return True


def relay_outbox(runtime, leadership: Leadership | None = None) -> int:
    """Publish outbox rows left behind and report the outbox depth."""
    if leadership is not None and not leadership.is_leader():
        return 0
    relayed = runtime.outbox.relay(older_than=runtime.cfg.outbox.relay_age)
    if relayed:
        metrics.OUTBOX_RELAYED.inc(relayed)
    metrics.OUTBOX_DEPTH.set(runtime.outbox.depth())
    return relayed


def register_jobs(scheduler: BaseScheduler, runtime, leadership: Leadership | None = None) -> Leadership:
    """Add every periodic job to an APScheduler scheduler; returns the leadership it uses."""
    leadership = leadership or Leadership(runtime.db)
    start = runtime.clock.now()
    scheduler.add_job(
        relay_outbox, "interval", args=[runtime, leadership], id="outbox.relay",
        seconds=runtime.cfg.outbox.relay_interval.total_seconds(), max_instances=1, coalesce=True, next_run_time=start,
    )
    # D8: every file.gc_interval, and once at start.
    scheduler.add_job(
        trigger_cleanup, "interval", args=[runtime, leadership], id="cleanup.trigger",
        seconds=runtime.cfg.file.gc_interval.total_seconds(), max_instances=1, coalesce=True, next_run_time=start,
    )
    return leadership
