"""What the suite's own server processes (clamd, SeaweedFS, PgBouncer) share."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any] | None, timeout_s: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not ended within the timeout; nothing when it is not running."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout_s)
