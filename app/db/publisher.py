"""The outbox (D9): jobs commit with the change that needs them, and are published only after the commit.

- UnitOfWork.enqueue() writes a row in the caller's transaction.
- After the commit, Database calls Outbox.publish_committed(). In the roles the jobs go to a publisher
  thread of the process, which publishes them in batches and deletes their rows with one statement per
  batch: a request never waits for RabbitMQ, and a broker that stops answering blocks that thread only.
  Elsewhere (tests, one-shot commands) they are published at once. A failure, a full queue or a process
  that ends first leave the rows for the relay.
- The scheduler runs Outbox.relay(): rows older than `outbox.relay_age` are claimed with
  FOR UPDATE SKIP LOCKED (so two relays never publish the same row), published and deleted.

Delivery is at least once: a crash between publish and delete publishes a job twice, and every actor is
idempotent. The dramatiq message id is derived from the outbox id, so both copies carry the same id.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import dramatiq
from opentelemetry.trace import SpanKind

from app.db import outbox as sql
from app.db.context import in_transaction
from app.db.pool import Database
from app.db.uow import Job
from app.platform import jobs as jobs_module
from app.platform import tracing
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.outbox")
_NAMESPACE = uuid.UUID("6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11")


def message_for(outbox_id: int, queue_name: str, actor_name: str, args: Sequence[Any]) -> dramatiq.Message[Any]:
    """The dramatiq message of an outbox row; its id derives from the row's, so a job published twice (a relay
    after a crash between publish and delete) carries one id."""
    return dramatiq.Message(
        queue_name=queue_name,
        actor_name=actor_name,
        args=tuple(args),
        kwargs={},
        options={},
        message_id=str(uuid.uuid5(_NAMESPACE, str(outbox_id))),
    )


# Actors whose one argument is a list of ids, so that jobs of several commits can travel as one message: a
# purge of many files costs one job where it cost one per file (D7 batches).
MERGEABLE = frozenset({jobs_module.PURGE_ACTOR})
MERGE_LIMIT = 1000  # ids in one merged message: the purge's batch


def merge_jobs(jobs: Sequence[Job]) -> list[tuple[list[int], Job]]:
    """Group mergeable jobs of the same queue and actor into messages of at most MERGE_LIMIT ids, in order of
    their first job; returns (the outbox ids a message stands for, the message's job). A merged job takes
    the first row's outbox id (its message id): were it published again by the relay, an actor is
    idempotent and the ids are the same."""
    merged: list[tuple[list[int], Job]] = []
    open_groups: dict[tuple[str, str], int] = {}
    for job in jobs:
        key = (job.queue_name, job.actor_name)
        mergeable = job.actor_name in MERGEABLE and len(job.args) == 1 and isinstance(job.args[0], list)
        index = open_groups.get(key) if mergeable else None
        if index is not None:
            ids, head = merged[index]
            if len(head.args[0]) + len(job.args[0]) <= MERGE_LIMIT:
                ids.append(job.outbox_id)
                merged[index] = (
                    ids,
                    replace(head, args=(head.args[0] + job.args[0],)),  # the first job's trace carries it
                )
                continue
        merged.append(([job.outbox_id], job))
        if mergeable:
            open_groups[key] = len(merged) - 1
    return merged


class Outbox:
    """Publishes outbox jobs to a dramatiq broker.

    Args:
        db: the database (for deleting published rows and relaying).
        broker: the dramatiq broker.
        background: publish committed jobs from a thread of this process (the roles) instead of the
            committing thread (tests, one-shot commands).
        capacity: jobs the thread's queue holds; beyond it, the relay publishes them.
        batch_size: most jobs published and deleted together.
        linger_s: how long the thread gathers jobs after the first of a batch (`outbox.publish_linger`): under
            load, the jobs of many commits become one message and one DELETE.
    """

    def __init__(
        self,
        db: Database,
        broker: Any,
        background: bool = False,
        capacity: int = 10_000,
        batch_size: int = 200,
        linger_s: float = 0.0,
    ):
        self.db = db
        self.linger_s = linger_s
        self.broker = broker
        self.background = background
        self.capacity = capacity
        self.batch_size = batch_size
        self._queue: queue.Queue[Job | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._start_lock = threading.Lock()

    def _publish(self, job: Job) -> None:
        if in_transaction():
            raise RuntimeError("publishing inside a transaction (D9)")
        self._send(job.outbox_id, job.queue_name, job.actor_name, job.args, job.traceparent, relayed=False)

    def _send(
        self,
        outbox_id: int,
        queue_name: str,
        actor_name: str,
        args: Sequence[Any],
        traceparent: str | None,
        relayed: bool,
    ) -> None:
        """Publish one message, in a span of the job's trace (its message carries that span on)."""
        with tracing.continued(
            traceparent,
            "outbox.publish",
            SpanKind.PRODUCER,
            outbox_id=outbox_id,
            actor=actor_name,
            relayed=relayed,
            **{"messaging.system": "rabbitmq", "messaging.destination.name": queue_name},
        ):
            message = message_for(outbox_id, queue_name, actor_name, args)
            carried = tracing.traceparent()
            if carried:
                message.options["traceparent"] = carried
            self.broker.enqueue(message)

    def publish_committed(self, jobs: Sequence[Job]) -> None:
        """Hand over the jobs of a committed unit of work; never raises and, in the background mode, never
        waits: what is not published stays in the outbox for the relay."""
        if not self.background:
            self.publish_now(jobs)
            return
        self._ensure_thread()
        for index, job in enumerate(jobs):
            try:
                self._queue.put_nowait(job)
            except queue.Full:  # the broker is slow or gone: the relay publishes the rest
                log_event(
                    log,
                    "warning",
                    "outbox.queue_full",
                    "publisher queue full; the relay will publish",
                    count=len(jobs) - index,
                )
                return

    def _ensure_thread(self) -> None:
        # A forked process (gunicorn, dramatiq) inherits no thread: each process starts its own on first use.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                if self._pid != os.getpid():
                    self._queue = queue.Queue(self.capacity)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="outbox-publisher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[Job] = []
            item = self._queue.get()
            taken = 1
            until = time.monotonic() + self.linger_s
            while item is not None:
                batch.append(item)
                if len(batch) >= self.batch_size:
                    break
                try:
                    item = self._queue.get(timeout=max(0.0, until - time.monotonic()))
                    taken += 1
                except queue.Empty:
                    break
            stop = item is None
            try:
                if batch:
                    self.publish_now(batch)
            finally:
                for _ in range(taken):  # flush() waits on the queue's count of unfinished items
                    self._queue.task_done()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every job handed over was published (or left to the relay); for tests and shutdown."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue.unfinished_tasks == 0:
                return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 2.0) -> None:
        """Publish what is queued (within `timeout`) and stop the thread; the rest stays for the relay."""
        thread = self._thread
        if thread is None or not thread.is_alive() or self._pid != os.getpid():
            return
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        thread.join(timeout)

    def publish_now(self, jobs: Sequence[Job]) -> None:
        """Publish jobs in this thread, then delete their rows in one statement. Never raises: what could
        not be published stays in the outbox for the relay."""
        published: list[int] = []
        for outbox_ids, job in merge_jobs(jobs):
            try:
                self._publish(job)
            except Exception:
                log_event(
                    log,
                    "warning",
                    "outbox.publish_failed",
                    "publish failed; the relay will retry",
                    actor=job.actor_name,
                    outbox_id=job.outbox_id,
                )
                break
            published.extend(outbox_ids)
        if published:
            try:
                self.db.read(lambda conn: sql.delete_published(conn, published))
            except Exception:
                log_event(log, "warning", "outbox.delete_failed", "published rows not deleted", count=len(published))

    def relay(self, older_than: timedelta, batch_size: int = 500) -> int:
        """Publish rows left behind, oldest first; returns how many were published.

        Runs in the scheduler. Each batch is claimed with SKIP LOCKED and deleted in the same transaction,
        so the lock is held while publishing: a second relay skips these rows instead of doubling them.
        """
        total = 0
        while True:
            started = time.monotonic()
            count = self._relay_batch(self.db.clock.now() - older_than, batch_size)
            total += count
            if count:
                log_event(
                    log,
                    "info",
                    "outbox.relayed",
                    "outbox relayed",
                    count=count,
                    duration_s=round(time.monotonic() - started, 3),
                )
            if count < batch_size:
                return total

    def _relay_batch(self, created_before: datetime, batch_size: int) -> int:
        # The lock of the claim is held while publishing: these jobs were committed long ago, so this is
        # not the "publish before commit" that D9 forbids; the lock is what keeps two relays apart.
        with self.db.pool.connection() as conn:
            with conn.transaction():
                rows = sql.claim_left_behind(conn, created_before, batch_size)
                done: list[int] = []
                for row in rows:
                    try:
                        self._send(row.id, row.queue_name, row.actor_name, row.args, row.traceparent, relayed=True)
                    except Exception:
                        log_event(
                            log,
                            "warning",
                            "outbox.publish_failed",
                            "relay publish failed",
                            actor=row.actor_name,
                            outbox_id=row.id,
                        )
                        break
                    done.append(row.id)
                if done:
                    sql.delete_published(conn, done)
                return len(done)

    def depth(self) -> int:
        """Jobs committed and not yet published (the lethe_outbox_depth gauge)."""
        return self.db.read(sql.outbox_depth)
