"""A real clamd (Debian's clamav-daemon) for the suite (D17, issue 20): started offline, without freshclam,
with a database of one signature (the EICAR test string's MD5 in a .hdb file), on 127.0.0.1 and a port the
system hands out, with a small StreamMaxLength so that the size limit is met by a small upload."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.ports import free_port
from tests.support.processes import stop_process

# The EICAR anti-virus test string: harmless, and recognised by every scanner as a test "virus".
EICAR = b"X5O!P%@AP[4\\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*"
STREAM_MAX = "1M"


def ping(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2) as sock:
            sock.sendall(b"zPING\0")
            return sock.recv(16).startswith(b"PONG")
    except OSError:
        return False


class RealClamd:
    """clamd as a child process; `address` is host:port."""

    def __init__(self, base: Path, stream_max: str = STREAM_MAX):
        self.stream_max = stream_max
        self.binary = shutil.which("clamd") or ("/usr/sbin/clamd" if os.path.exists("/usr/sbin/clamd") else None)
        self.base = base
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[Any] | None = None

    def start(self, timeout_s: float = 120) -> RealClamd:
        assert self.binary is not None
        database = self.base / "db"
        database.mkdir(parents=True, exist_ok=True)
        digest = hashlib.md5(EICAR, usedforsecurity=False).hexdigest()
        (database / "lethe-test.hdb").write_text(f"{digest}:{len(EICAR)}:Lethe-Test-EICAR\n")
        config = self.base / "clamd.conf"
        config.write_text(
            "\n".join(
                [
                    "Foreground yes",
                    f"TCPSocket {self.port}",
                    "TCPAddr 127.0.0.1",
                    f"DatabaseDirectory {database}",
                    f"StreamMaxLength {self.stream_max}",
                    f"LogFile {self.base / 'clamd.log'}",
                    "Bytecode no",
                    f"PidFile {self.base / 'clamd.pid'}",
                    f"TemporaryDirectory {self.base}",
                ]
            )
            + "\n"
        )
        self.process = subprocess.Popen(
            [self.binary, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    "clamd exited at start: "
                    + (self.process.stderr.read() if self.process.stderr else b"").decode()[-400:]
                )
            if ping(("127.0.0.1", self.port)):
                return self
            time.sleep(0.2)
        raise RuntimeError("clamd did not answer PING in time")

    def stop(self) -> None:
        stop_process(self.process)
