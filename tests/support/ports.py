"""Ports for the servers the suite starts (PostgreSQL standbys, RabbitMQ nodes, SeaweedFS, clamd, the roles).

A port the system hands out to `bind(("127.0.0.1", 0))` comes from the range it also gives every outgoing
connection (/proc/sys/net/ipv4/ip_local_port_range), and the suite opens thousands of those: between the probe
socket's close and the server's own bind, a connection to PostgreSQL or RabbitMQ could take the port, and the
server failed to start ("Address already in use"; seen for a standby and for SeaweedFS's S3 gRPC port in one
run). The ports here lie below that range, where the system never puts a connection on its own, and each is
checked free by a bind before it is handed out. Each test process walks a slice of its own (by its xdist worker),
from a random place in it, so two workers never hand out one port and a process never hands out one twice
until its slice wraps."""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

LOWEST = 10000  # below: the well-known services of a machine (PostgreSQL, RabbitMQ's 4369 and 5672, Redis, ...)
SLICES = 8  # the controller and up to seven workers; a worker past those shares a slice (and the bind check)
_lock = threading.Lock()
_cursor: list[int] = []  # where this process's walk through its slice is


def _connection_range() -> tuple[int, int]:
    try:
        low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def _slice() -> range | None:
    """This process's ports, or None where the connection range leaves too little room below it."""
    low, _ = _connection_range()
    width = (low - LOWEST) // SLICES
    if width < 100:
        return None
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    start = LOWEST + (index % SLICES) * width
    return range(start, start + width)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _from_system() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on, outside the range of outgoing connections."""
    ports = _slice()
    if ports is None:
        return _from_system()
    with _lock:
        if not _cursor:
            _cursor.append(random.randrange(len(ports)))
        for _ in range(len(ports)):
            port = ports[_cursor[0] % len(ports)]
            _cursor[0] += 1
            if _free(port):
                return port
    return _from_system()  # the whole slice taken: a port of the system's


def free_ports(count: int) -> list[int]:
    return [free_port() for _ in range(count)]
