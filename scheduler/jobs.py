"""Every schedule of the scheduler role, in one place (D1, D9; STYLE.md: one register_jobs()).

The cleanup trigger and the retention schedules join here with their issues.
"""

from __future__ import annotations

import logging

from apscheduler.schedulers.base import BaseScheduler

from app import metrics

log = logging.getLogger("lethe.scheduler")


def relay_outbox(runtime) -> int:
    """Publish outbox rows left behind and report the outbox depth."""
    relayed = runtime.outbox.relay(older_than_s=runtime.cfg.outbox.relay_age)
    if relayed:
        metrics.OUTBOX_RELAYED.inc(relayed)
    metrics.OUTBOX_DEPTH.set(runtime.outbox.depth())
    return relayed


def register_jobs(scheduler: BaseScheduler, runtime) -> None:
    """Add every periodic job to an APScheduler scheduler."""
    scheduler.add_job(
        relay_outbox, "interval", args=[runtime], id="outbox.relay",
        seconds=runtime.cfg.outbox.relay_interval, max_instances=1, coalesce=True,
        next_run_time=runtime.clock.now(),
    )
