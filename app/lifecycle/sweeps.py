# A sweep deletes what another program wrote under a declared prefix (D16, seed 003 4.6). It is bounded
# twice (seed 002): in time, by a created-before bound taken when the run starts (an object written after it
# is never touched, so a slow or replayed run cannot delete a newer object), and in width, by waves of batch
# deletes (lifecycle/waves.py). It never touches f/, uploads/ or .tmp/: config refuses a prefix that
# overlaps them, and every listed key is checked to lie under the prefix. On fs a link is deleted as an
# entry and never followed, and emptied directories go.
"""Sweeps of unmanaged prefixes: a run and its dry run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from app.db import retention as runs_sql
from app.db.locks import exclusive
from app.domain.retention import UnmanagedPrefix, sweepable
from app.errors import NotFound
from app.lifecycle.waves import delete_in_waves
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.storage.base import DeleteFailure

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.sweep")


@dataclass
class SweepReport:
    """What one sweep did (or would do), as counts."""

    prefix: str
    dry_run: bool
    created_before: datetime
    listed: int = 0
    deleted: int = 0
    newer: int = 0
    invalid: int = 0
    failed: int = 0
    batches: int = 0
    directories: int = 0
    duration_s: float = 0.0
    busy: bool = False


def prefix_named(rt: Runtime, prefix: str) -> UnmanagedPrefix:
    """The declared unmanaged prefix.

    Raises:
        NotFound: it is not declared (any more).
    """
    for unmanaged in rt.cfg.storage.unmanaged_prefixes:
        if unmanaged.prefix == prefix:
            return unmanaged
    raise NotFound("no unmanaged prefix of that name")


def run_sweep(
    rt: Runtime, unmanaged: UnmanagedPrefix, dry_run: bool = False, progress: Callable[[int], None] | None = None
) -> SweepReport:
    """Sweep one unmanaged prefix now, unless another runner sweeps it (D19: then the report says `busy`);
    `progress` is called with the objects listed so far, every 1,000.

    Raises:
        StorageError: the store failed; what was deleted stays deleted, and the next run goes on.
    """
    with rt.db.maintenance(), exclusive(rt.db, f"sweep:{unmanaged.prefix}") as mine:
        if not mine:
            log_event(log, "info", "sweep.busy", "another runner sweeps this prefix", prefix=unmanaged.prefix)
            return SweepReport(prefix=unmanaged.prefix, dry_run=dry_run, created_before=rt.clock.now(), busy=True)
        return _sweep_alone(rt, unmanaged, dry_run, progress)


def _remover(rt: Runtime, store: str) -> Callable[[Sequence[str]], list[DeleteFailure]]:
    return lambda keys: rt.files.remove_unmanaged(keys, store=store)


def _sweep_alone(
    rt: Runtime, unmanaged: UnmanagedPrefix, dry_run: bool, progress: Callable[[int], None] | None
) -> SweepReport:
    started_at = rt.clock.now()
    started = time.monotonic()
    report = SweepReport(prefix=unmanaged.prefix, dry_run=dry_run, created_before=unmanaged.created_before(started_at))

    def doomed(store: str) -> Iterator[str]:
        for listed in rt.maintenance_of(store).list_prefix(unmanaged.prefix):
            report.listed += 1
            if progress is not None and report.listed % 1000 == 0:
                progress(report.listed)
            if listed.modified_at >= report.created_before:
                report.newer += 1
            elif not sweepable(listed.key, listed.modified_at, unmanaged.prefix, report.created_before):
                report.invalid += 1
            else:
                yield listed.key

    # The prefix is swept in every store: the other software may write beside Lethe in any of them.
    if dry_run:
        report.deleted = sum(1 for store in rt.store_names for _ in doomed(store))
    else:
        for store in rt.store_names:
            waves = delete_in_waves(_remover(rt, store), doomed(store), rt.lifecycle.sweep_concurrency)
            report.deleted += waves.deleted
            report.failed += waves.failed
            report.batches += waves.batches
            report.directories += rt.maintenance_of(store).prune_dirs(unmanaged.prefix)
        rt.db.unit_of_work(
            lambda uow: runs_sql.record_run(uow.conn, unmanaged.run_name, started_at), name="sweep.record"
        )
        for outcome in ("deleted", "failed", "newer", "invalid"):
            metrics.SWEEP_OBJECTS.labels(unmanaged.prefix, outcome).inc(getattr(report, outcome))
        metrics.SWEEP_LAST_RUN.labels(unmanaged.prefix).set(started_at.timestamp())
    report.duration_s = round(time.monotonic() - started, 4)
    log_event(
        log,
        "info",
        "sweep.ran",
        "unmanaged prefix swept",
        prefix=unmanaged.prefix,
        dry_run=dry_run,
        listed=report.listed,
        deleted=report.deleted,
        newer=report.newer,
        invalid=report.invalid,
        failed=report.failed,
        batches=report.batches,
        duration_s=report.duration_s,
    )
    return report
