"""The outbox (D9): jobs commit with the change that needs them, and are published only after the commit.

- UnitOfWork.enqueue() writes a row in the caller's transaction.
- After the commit, Database calls Outbox.publish_committed(): the jobs are published at once and their
  rows deleted. A failure leaves the rows for the relay.
- The scheduler runs Outbox.relay(): rows older than `outbox.relay_age` are claimed with
  FOR UPDATE SKIP LOCKED (so two relays never publish the same row), published and deleted.

Delivery is at least once: a crash between publish and delete publishes a job twice, and every actor is
idempotent. The dramatiq message id is derived from the outbox id, so both copies carry the same id.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any, Sequence

import dramatiq

from app.db import outbox as sql
from app.db.context import in_transaction
from app.db.core import Database, Job
from app.logs import log_event

log = logging.getLogger("lethe.outbox")
_NAMESPACE = uuid.UUID("6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11")


def message_for(outbox_id: int, queue_name: str, actor_name: str, args: Sequence[Any]) -> dramatiq.Message:
    return dramatiq.Message(
        queue_name=queue_name,
        actor_name=actor_name,
        args=tuple(args),
        kwargs={},
        options={},
        message_id=str(uuid.uuid5(_NAMESPACE, str(outbox_id))),
    )


class Outbox:
    """Publishes outbox jobs to a dramatiq broker.

    Args:
        db: the database (for deleting published rows and relaying).
        broker: the dramatiq broker.
    """

    def __init__(self, db: Database, broker: Any):
        self.db = db
        self.broker = broker

    def _publish(self, outbox_id: int, queue_name: str, actor_name: str, args: Sequence[Any]) -> None:
        if in_transaction():
            raise RuntimeError("publishing inside a transaction (D9)")
        self.broker.enqueue(message_for(outbox_id, queue_name, actor_name, args))

    def publish_committed(self, jobs: Sequence[Job]) -> None:
        """Publish the jobs of a committed unit of work, then delete their rows. Never raises: what could
        not be published stays in the outbox for the relay."""
        published: list[int] = []
        for job in jobs:
            try:
                self._publish(job.outbox_id, job.queue_name, job.actor_name, job.args)
            except Exception:  # noqa: BLE001 - the relay catches up; the committed change stands
                log_event(log, "warning", "outbox.publish_failed", "publish failed; the relay will retry",
                          actor=job.actor_name, outbox_id=job.outbox_id)
                break
            published.append(job.outbox_id)
        if published:
            try:
                self.db.read(lambda conn: sql.delete_published(conn, published))
            except Exception:  # noqa: BLE001 - at least once: the relay publishes them again
                log_event(log, "warning", "outbox.delete_failed", "published rows not deleted",
                          count=len(published))

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
                log_event(log, "info", "outbox.relayed", "outbox relayed", count=count,
                          duration_s=round(time.monotonic() - started, 3))
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
                        self.broker.enqueue(message_for(row.id, row.queue_name, row.actor_name, row.args))
                    except Exception:  # noqa: BLE001 - the broker is down: keep the rest for the next run
                        log_event(log, "warning", "outbox.publish_failed", "relay publish failed",
                                  actor=row.actor_name, outbox_id=row.id)
                        break
                    done.append(row.id)
                if done:
                    sql.delete_published(conn, done)
                return len(done)

    def depth(self) -> int:
        return self.db.read(sql.outbox_depth)
