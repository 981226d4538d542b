"""Readiness (D13): each dependency checked on a thread of its own, the answer bounded in time.

/readyz must answer within 2 s whatever a dependency does: refuse, stall, or answer slowly. Each check runs
on its own single thread (the broker's channel is per thread, so the check keeps one connection), and the
answer waits for all of them at most `deadline` seconds: a check still running counts as not ready. A check
that hangs is not started again while it runs; the next /readyz waits on the same attempt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class Readiness:
    """Checks by name; those named in `soft` degrade the service without making it unready (a scanner outage
    delays scans, it does not stop uploads or downloads)."""

    def __init__(
        self, checks: dict[str, Callable[[], None]], deadline: float = 1.5, soft: frozenset[str] = frozenset()
    ):
        self.checks = checks
        self.deadline = deadline
        self.soft = soft
        self._executors = {name: ThreadPoolExecutor(1, thread_name_prefix=f"readyz-{name}") for name in checks}
        self._running: dict[str, Future[None]] = {}
        self._lock = threading.Lock()

    def _start(self, name: str) -> Future[None]:
        with self._lock:
            future = self._running.get(name)
            if future is None or future.done():
                future = self._executors[name].submit(self.checks[name])
                self._running[name] = future
            return future

    def failures(self) -> dict[str, str]:
        """The dependencies that are not ready, each with the error's type name (never its text: D15)."""
        futures = {name: self._start(name) for name in self.checks}
        end = time.monotonic() + self.deadline
        failed: dict[str, str] = {}
        for name, future in futures.items():
            try:
                future.result(timeout=max(0.0, end - time.monotonic()))
            except TimeoutError:
                failed[name] = "Timeout"
            except Exception as exc:
                failed[name] = type(exc).__name__
        return failed

    def close(self) -> None:
        for executor in self._executors.values():
            executor.shutdown(wait=False, cancel_futures=True)
