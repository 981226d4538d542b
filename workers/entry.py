"""What `dramatiq workers.entry` imports in every worker process (the role `worker`, D1).

Each forked process builds its own Runtime (pools must not cross a fork). The configuration was checked by
`lethe worker` before dramatiq started, so an error here is unexpected; it still exits 2 naming keys only.
"""

from __future__ import annotations

import logging
import os

import dramatiq

from app.entry.support import load_config_or_exit
from app.entry.wiring import build_runtime
from app.platform.jobs.broker import build_broker
from app.platform.observability.log_setup import setup_logging
from app.platform.observability.logs import log_event
from app.platform.observability.sentry import setup_sentry
from workers.actors import FlushAtShutdown, register
from workers.pools import add_webhook_pool, pool_wanted

cfg = load_config_or_exit(role="worker")
setup_logging("worker", cfg.log.format, cfg.log.level)
setup_sentry(cfg.sentry.dsn, "worker")
broker = build_broker(cfg.broker.url, cfg.broker.queue_type)
dramatiq.set_broker(broker)
runtime = build_runtime(cfg, broker, role="worker", background_publish=True)
actors = register(broker, runtime)
broker.add_middleware(FlushAtShutdown(runtime))
if pool_wanted():
    add_webhook_pool(broker, cfg.webhooks.concurrency)
log_event(
    logging.getLogger("lethe.worker"),
    "info",
    "worker.started",
    "worker process started",
    pid=os.getpid(),
    actors=sorted(actors),
)
