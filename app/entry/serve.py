"""The api role's server: gunicorn with gthread workers, configured only through Lethe's keys (D14)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication

from app.entry.support import setup_role_logging
from app.platform.observability.log_setup import gunicorn_logconfig

if TYPE_CHECKING:
    from flask import Flask

    from app.platform.config.tree import Config
    from app.runtime import Runtime


class ApiServer(BaseApplication):  # type: ignore[misc]  # gunicorn ships no type information
    """gunicorn serving create_app, each worker process building its own runtime after the fork."""

    def __init__(self, cfg: Config, port: int | None = None) -> None:
        self.lethe_cfg, self.port = cfg, port or cfg.api.port
        super().__init__()

    def load_config(self) -> None:
        cfg = self.lethe_cfg
        settings = {
            "bind": f"{cfg.api.host}:{self.port}",
            "workers": cfg.api.workers,
            "worker_class": "gthread",
            "threads": cfg.api.threads,
            "timeout": int(cfg.api.timeout.total_seconds()),
            "graceful_timeout": 20,
            "accesslog": None,
            "child_exit": child_exit,
            "worker_exit": worker_exit,
            "control_socket_disable": True,  # it would need a writable home directory
            "logconfig_dict": gunicorn_logconfig("api", cfg.log.format, cfg.log.level),
        }
        for name, value in settings.items():
            self.cfg.set(name, value)

    def load(self) -> Flask:
        # Runs in each worker after the fork: every process gets its own pools.
        from app.api.app import create_app
        from app.entry.wiring import build_runtime
        from app.platform.jobs.broker import build_broker

        cfg = self.lethe_cfg
        setup_role_logging("api", cfg)
        broker = build_broker(cfg.broker.url, cfg.broker.queue_type)
        runtime = build_runtime(cfg, broker, role="api", background_publish=True)
        _RUNTIMES.append(runtime)
        return create_app(runtime)


_RUNTIMES: list[Runtime] = []  # the runtime of this worker process (built by load() after the fork)


def worker_exit(server: Any, worker: Any) -> None:
    """In a worker process that stops (SIGTERM, SIGINT, a restart): the journal entries its requests committed are
    written to the journal, and their jobs published, before it exits."""
    for runtime in _RUNTIMES:
        runtime.journal.close()
        runtime.outbox.close()


def child_exit(server: Any, worker: Any) -> None:
    """A worker process ended: its metrics files are merged into the dead ones' (prometheus multiprocess)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
