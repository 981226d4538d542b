"""A server of the test process's own (a fake clamd, a webhook receiver, moto, a page for Chromium), served on a
thread."""

from __future__ import annotations

import threading
from typing import Any

# socketserver's serve_forever looks for shutdown() once per poll interval, half a second unless told: every
# server a test stopped cost it up to that (62 teardowns of about 0.5 s in one run of the suite).
SHUTDOWN_POLL_S = 0.02


def serve_in_thread(server: Any, name: str | None = None) -> threading.Thread:
    """Serve `server` (a socketserver.BaseServer, werkzeug's included) on a daemon thread until its shutdown(),
    which then returns within SHUTDOWN_POLL_S."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, name=name, daemon=True
    )
    thread.start()
    return thread
