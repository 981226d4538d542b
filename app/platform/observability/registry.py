"""The Prometheus registry to expose, and the multiprocess directory (D15). prometheus_client is imported
inside the functions: the directory must be set before anything imports it in a role that forks."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


def metrics_registry() -> CollectorRegistry:
    """The registry to expose: aggregated over processes when PROMETHEUS_MULTIPROC_DIR is set (gunicorn and
    dramatiq fork several processes, D15), else the default one."""
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


def prepare_multiprocess_dir(path: str | None = None) -> str:
    """Set PROMETHEUS_MULTIPROC_DIR to an empty directory before prometheus_client is imported.

    Must run before anything imports prometheus_client in a role that forks (api, worker)."""
    import tempfile

    path = path or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="lethe-metrics-")
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.unlink(os.path.join(path, name))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path
