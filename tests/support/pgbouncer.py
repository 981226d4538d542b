"""PgBouncer in transaction pooling mode for the suite (issue 23): Debian's pgbouncer in front of the test
PostgreSQL, on 127.0.0.1 and a free port (tests/support/ports.py). It refuses to run as root, so as root it drops to
the postgres user (-u)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.ports import free_port
from tests.support.processes import stop_process


class PgBouncer:
    def __init__(self, base: Path, server_url: str):
        self.binary = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
        )
        self.base = base
        self.server = urlsplit(server_url)
        self.process: subprocess.Popen[Any] | None = None
        self.port = free_port()

    def url_for(self, database_url: str) -> str:
        """The URL of the same database, through PgBouncer."""
        parts = urlsplit(database_url)
        return parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{self.port}").geturl()

    def start(self, timeout_s: float = 30) -> PgBouncer:
        assert self.binary is not None
        os.chmod(self.base, 0o777)
        user = self.server.username or "postgres"
        (self.base / "users.txt").write_text(f'"{user}" ""\n')
        (self.base / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={self.server.hostname or '127.0.0.1'} port={self.server.port or 5432}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.base / 'users.txt'}",
                    "pool_mode = transaction",
                    "max_client_conn = 500",
                    "default_pool_size = 20",
                    f"logfile = {self.base / 'pgbouncer.log'}",
                    f"pidfile = {self.base / 'pgbouncer.pid'}",
                    "ignore_startup_parameters = extra_float_digits",
                ]
            )
            + "\n"
        )
        for name in ("users.txt", "pgbouncer.ini"):
            os.chmod(self.base / name, 0o644)
        argv = [self.binary, *(["-u", "postgres"] if os.geteuid() == 0 else []), str(self.base / "pgbouncer.ini")]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.base)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    "pgbouncer exited at start: "
                    + (self.process.stderr.read() if self.process.stderr else b"").decode()[-400:]
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("pgbouncer did not listen in time")

    def stop(self) -> None:
        stop_process(self.process)
