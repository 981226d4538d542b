"""The worker's thread pools: webhook deliveries on threads of their own.

A receiver that answers slowly holds an attempt for up to webhooks.timeout; on the worker's shared threads a
few such attempts would stall purges and scans. So the `webhooks` queue is consumed by a dramatiq Worker of its
own in each worker process, with webhooks.concurrency threads, started and stopped with the process's main
Worker by a broker middleware (dramatiq's own hooks), and the main Worker never consumes that queue.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

import dramatiq
from dramatiq import Worker

from app.platform.jobs import WEBHOOK_QUEUE

# Set by `lethe worker` for the dramatiq processes it starts: whether they run the webhook pool.
POOL_ENV = "LETHE_WORKER_WEBHOOK_POOL"


def split_queues(queues: Iterable[str]) -> tuple[set[str], bool]:
    """The queues the main Worker consumes, and whether webhook deliveries get their own pool."""
    wanted = set(queues)
    if wanted == {WEBHOOK_QUEUE}:
        return wanted, False  # a worker for webhooks alone: its main Worker is the pool
    return wanted - {WEBHOOK_QUEUE}, WEBHOOK_QUEUE in wanted


class WebhookPool(dramatiq.Middleware):
    """Starts a Worker for the webhooks queue, with threads of its own, after the process's main Worker booted,
    and stops it before the main one shuts down."""

    def __init__(self, threads: int):
        self.threads = threads
        self.pool: Worker | None = None
        self.stopping: tuple[Worker, threading.Thread] | None = None  # the main Worker and the pool's stop

    def after_worker_boot(self, broker: dramatiq.Broker, worker: Worker) -> None:
        """Start the pool once, beside the first Worker that boots (never beside itself)."""
        if self.pool is not None:
            return
        self.pool = Worker(
            broker, queues={WEBHOOK_QUEUE}, worker_threads=self.threads, worker_timeout=worker.worker_timeout
        )
        self.pool.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: Worker) -> None:
        """Stop the pool beside the main Worker, not before it (each waits out its threads' polls): attempts in
        flight get their time, leases cover the rest."""
        pool, self.pool = self.pool, None
        if pool is not None and worker is not pool:
            stopping = threading.Thread(target=pool.stop, kwargs={"timeout": 5000}, name="webhook-pool-stop")
            stopping.start()
            self.stopping = (worker, stopping)

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: Worker) -> None:
        """The main Worker is down: wait for the pool's (it ends within the same timeout). dramatiq calls the
        after-hooks in reverse order of addition, so this runs before those of middleware added earlier (the
        worker's FlushAtShutdown: what the deliveries committed is flushed after them). The pool's own stop comes
        here too, from the thread that stops it."""
        if self.stopping is not None and self.stopping[0] is worker:
            self.stopping[1].join()
            self.stopping = None


def add_webhook_pool(broker: dramatiq.Broker, threads: int) -> None:
    """Give the broker's process a webhook pool (call before its main Worker starts)."""
    broker.add_middleware(WebhookPool(threads))


def pool_wanted() -> bool:
    """Whether this worker process runs the webhook pool (`lethe worker` said so in the environment)."""
    return os.environ.get(POOL_ENV) == "1"
