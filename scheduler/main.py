"""The scheduler role (D1): one APScheduler process; stops cleanly on SIGTERM."""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING

from apscheduler.schedulers.blocking import BlockingScheduler

from app.entry.wiring import build_runtime
from app.platform.jobs.broker import build_broker
from app.platform.observability.logs import log_event
from app.platform.observability.registry import metrics_registry
from scheduler.jobs import register_jobs

if TYPE_CHECKING:
    from types import FrameType

    from app.platform.config.tree import Config

log = logging.getLogger("lethe.scheduler")


def run(cfg: Config) -> int:
    from prometheus_client import start_http_server

    broker = build_broker(cfg.broker.url, cfg.broker.queue_type)
    runtime = build_runtime(cfg, broker, role="scheduler")
    start_http_server(cfg.metrics.port, addr=cfg.api.host, registry=metrics_registry())
    scheduler = BlockingScheduler(timezone=cfg.schedule.timezone)
    leadership = register_jobs(scheduler, runtime)

    def stop(signum: int, frame: FrameType | None) -> None:
        log_event(log, "info", "scheduler.stopping", "scheduler stopping", signal=signum)
        scheduler.shutdown(wait=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log_event(log, "info", "scheduler.started", "scheduler started")
    scheduler.start()
    leadership.release()
    runtime.close()
    broker.close()
    log_event(log, "info", "scheduler.stopped", "scheduler stopped")
    return 0
