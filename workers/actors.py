"""The actors (D9). Thin: each takes ids, calls one service function, and is idempotent; a missing files
row is treated like a deleted file (the job ends without error and without writes).

Actors are declared here with @actor and bound to a broker and a Runtime by register(), so that neither
is chosen at import time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import dramatiq
import psycopg

from app.content import scan, variants
from app.content.clamd import ClamdUnavailable
from app.errors import NotFound, ObjectFailed, RestorePending, SchemaMismatch, StorageError
from app.lifecycle import cleanup, erasure, purge, retention, stores, sweeps, webhooks
from app.lifecycle.journal import RestoreGuard
from app.platform import jobs, tracing
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.worker")
RESTORE_WAIT_MS = 10_000  # how long a job waits, each time, while the database is behind its journal


class FlushAtShutdown(dramatiq.Middleware):
    """When the worker process stops (SIGTERM, SIGINT), once its actors are done: the journal entries it committed
    are written to the journal and the jobs it committed are published, before the process exits."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime

    def after_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        self.runtime.journal.close()
        self.runtime.outbox.close()
        tracing.shutdown()  # the spans of what closed above, and of the last jobs, leave before the process


@dataclass(frozen=True)
class ActorSpec:
    name: str
    fn: Callable[..., Any]
    queue_name: str
    options: dict[str, Any] = field(default_factory=dict)


F = TypeVar("F", bound=Callable[..., Any])

ACTORS: dict[str, ActorSpec] = {}


def actor(queue_name: str, **options: Any) -> Callable[[F], F]:
    """Declare an actor `fn(runtime, *ids)`. Options are dramatiq's (max_retries, time_limit, throws)."""

    def decorate(fn: F) -> F:
        ACTORS[fn.__name__] = ActorSpec(fn.__name__, fn, queue_name, options)
        return fn

    return decorate


def register(
    broker: dramatiq.Broker, runtime: Any, specs: dict[str, ActorSpec] | None = None
) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Bind the declared actors to a broker, each calling its function with the runtime first."""
    bound: dict[str, dramatiq.Actor[Any, Any]] = {}
    guard = RestoreGuard(runtime)
    for spec in (ACTORS if specs is None else specs).values():

        def run(*args: Any, _fn: Callable[..., Any] = spec.fn, _name: str = spec.name) -> Any:
            waiting = guard.reason()
            if waiting is not None:
                # A restored database is behind its deletion journal: no job runs (nothing is made deliverable,
                # nothing purged on the strength of old rows) until the journal is applied again. The job is sent
                # again for later, as a new message: waiting must not spend its retries.
                log_event(
                    log,
                    "warning",
                    "worker.restore_pending",
                    "the database is behind its deletion journal; the job waits",
                    actor=_name,
                    reason=waiting,
                )
                try:
                    bound[_name].send_with_options(args=args, delay=RESTORE_WAIT_MS)
                except Exception:
                    raise dramatiq.Retry(delay=RESTORE_WAIT_MS) from None
                return None
            try:
                with guard.serving():
                    return _fn(runtime, *args)
            except (psycopg.OperationalError, StorageError, ClamdUnavailable, RestorePending, SchemaMismatch) as exc:
                if isinstance(exc, ObjectFailed):
                    raise
                # An outage is expected (D13): one warning line, no stack trace, and dramatiq's retry with
                # backoff; the catch-up (D8 d) is the safety net when the retries run out.
                log_event(
                    log,
                    "warning",
                    "worker.dependency_unavailable",
                    "a dependency is unavailable; the job will be retried",
                    actor=_name,
                    error=type(exc).__name__,
                )
                raise dramatiq.Retry() from None

        run.__name__ = spec.name
        run.__module__ = spec.fn.__module__
        bound[spec.name] = dramatiq.Actor(
            run, broker=broker, actor_name=spec.name, queue_name=spec.queue_name, priority=0, options=dict(spec.options)
        )
    return bound


@actor(jobs.SCAN_QUEUE, max_retries=20, min_backoff=1_000, max_backoff=300_000, time_limit=15 * 60_000)
def scan_file(rt: Runtime, file_id: str) -> None:
    """Scan one file (clamd, or `skipped`) and record the outcome under its row lock."""
    scan.scan_file(rt, uuid.UUID(file_id))


@actor(jobs.VARIANTS_QUEUE, max_retries=10, min_backoff=1_000, max_backoff=300_000, time_limit=10 * 60_000)
def make_variants(rt: Runtime, file_id: str) -> None:
    """Make a deliverable image's variants (or record why it gets none); a late write after its purge is removed."""
    variants.make_variants(rt, uuid.UUID(file_id))


@actor(jobs.PURGE_QUEUE, max_retries=30, min_backoff=1_000, max_backoff=600_000, time_limit=30 * 60_000)
def purge_objects(rt: Runtime, file_ids: list[str]) -> None:
    """Purge many files (D7): their objects in batches, then the rows of the deleted ones."""
    purge.purge_files(rt, file_ids)


@actor(jobs.CLEANUP_QUEUE, max_retries=0, time_limit=60 * 60_000)
def cleanup_pending(rt: Runtime) -> None:
    """The periodic cleanup (D8). No retries: the scheduler sends the next run every file.gc_interval."""
    report = cleanup.run_cleanup(rt)
    if report.first_error is not None:
        raise report.first_error


@actor(jobs.RETENTION_QUEUE, max_retries=3, min_backoff=10_000, time_limit=60 * 60_000)
def retention_run(rt: Runtime, policy_name: str) -> None:
    """A scheduled run of one retention policy (D16); its cadence gate is checked in PostgreSQL."""
    try:
        policy = retention.policy_named(rt, policy_name)
    except NotFound:  # removed from the configuration since the trigger was sent
        log_event(log, "warning", "retention.unknown_policy", "no retention policy of that name; run dropped")
        return
    report = retention.run_policy(rt, policy)
    if report.first_error is not None:
        raise report.first_error  # not recorded for the gate: the retry runs it again (D19)


@actor(jobs.SWEEP_QUEUE, max_retries=3, min_backoff=10_000, time_limit=60 * 60_000)
def sweep_prefix(rt: Runtime, prefix: str) -> None:
    """A scheduled sweep of one unmanaged prefix (D16)."""
    try:
        unmanaged = sweeps.prefix_named(rt, prefix)
    except NotFound:
        log_event(log, "warning", "sweep.unknown_prefix", "no unmanaged prefix of that name; sweep dropped")
        return
    sweeps.run_sweep(rt, unmanaged)


@actor(jobs.ERASE_QUEUE, max_retries=100, time_limit=60 * 60_000)
def erase_subject(rt: Runtime, erasure_id: str) -> None:
    """Rounds of an erasure (D16) until it completes or fails; each round is resumable and idempotent. When
    the retries run out, the cleanup's step i runs the rounds of every running erasure."""
    if erasure.erase_round(rt, uuid.UUID(erasure_id)) == "running":
        raise dramatiq.Retry(delay=5_000)  # not an error: another round in 5 s


@actor(jobs.STORES_QUEUE, max_retries=30, min_backoff=5_000, max_backoff=600_000, time_limit=60 * 60_000)
def migrate_stores(rt: Runtime, migration_id: str) -> None:
    """One batch of a migration between stores; it commits the next with its progress. When its retries run out,
    or it waits for files to become movable, the cleanup's step r commits the next."""
    stores.run_batch(rt, uuid.UUID(migration_id))


@actor(jobs.WEBHOOK_QUEUE, max_retries=40, time_limit=30 * 60_000)
def deliver_webhooks(rt: Runtime, delivery_ids: list[str]) -> None:
    """Attempt the due webhook deliveries of this message; while any is pending, the message comes
    back when the earliest is due (webhooks.retry_schedule). A lost message is sent again by the cleanup."""
    report = webhooks.deliver(rt, [uuid.UUID(delivery_id) for delivery_id in delivery_ids])
    if report.next_in is not None:
        raise dramatiq.Retry(delay=max(int(report.next_in.total_seconds() * 1000), 1_000))  # not an error
