"""A RabbitMQ node of a test's own: the machine's rabbitmq-server with its own node name, AMQP and distribution
ports handed out by the system, data and log directories under the test's folder, and no plugins. A drill that
stops RabbitMQ stops this node, never the machine's shared one (every run on the machine uses that)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from tests.support.ports import free_ports
from tests.support.processes import stop_process


class RabbitNode:
    """One node; `ctl` runs rabbitmqctl against it. Started as root, the server runs as the rabbitmq user
    (Debian's wrapper), so its folder is handed to that user."""

    def __init__(self, name: str | None = None):
        self.binary = shutil.which("rabbitmq-server")
        self.base = Path()
        self.node = f"{name or 'lethe_' + uuid.uuid4().hex[:8]}@localhost"
        self.port, self.dist_port = free_ports(2)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _env(self) -> dict[str, str]:
        return dict(
            os.environ,
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.base / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.base / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.base / "enabled_plugins"),
            RABBITMQ_FEATURE_FLAGS_FILE=str(self.base / "feature_flags"),
            RABBITMQ_PID_FILE=str(self.base / "pid"),
            RABBITMQ_CONFIG_FILE=str(self.base / "rabbitmq"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.base / "advanced.config"),
        )

    def start(self, timeout_s: float = 60) -> RabbitNode:
        assert self.binary is not None
        # A folder of its own under the system's temporary directory: pytest's are private to the user running
        # the tests, and the server runs as the rabbitmq user.
        self.base = Path(tempfile.mkdtemp(prefix="lethe-rabbit-"))
        (self.base / "enabled_plugins").write_text("[].\n")
        if os.geteuid() == 0:
            shutil.chown(self.base, "rabbitmq", "rabbitmq")
            shutil.chown(self.base / "enabled_plugins", "rabbitmq", "rabbitmq")
        self.log = open(self.base / "server.out", "wb")
        self.process = subprocess.Popen(
            [self.binary], env=self._env(), stdout=self.log, stderr=subprocess.STDOUT, cwd=self.base
        )
        try:
            self.wait_for_amqp(timeout_s)
        except RuntimeError:
            self.stop()
            raise
        return self

    def wait_for_amqp(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    "rabbitmq-server exited at start: " + (self.base / "server.out").read_text(errors="replace")[-400:]
                )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the RabbitMQ node's AMQP port did not answer in time")

    def ctl(self, *args: str, timeout_s: float = 120, patient: bool = True) -> str:
        """rabbitmqctl on this node. Exit 69 (the CLI could not reach the node: it happened once right after a
        node's AMQP port answered, on a loaded machine) is asked again for up to 30 s; any other failure, or 69
        after that, fails with what the CLI said."""
        deadline = time.monotonic() + (30 if patient else 0)
        while True:
            done = subprocess.run(
                ["rabbitmqctl", "-n", self.node, *args], capture_output=True, text=True, timeout=timeout_s
            )
            if done.returncode == 0:
                return done.stdout
            if done.returncode != 69 or time.monotonic() > deadline:
                raise AssertionError(f"rabbitmqctl {' '.join(args)} exited {done.returncode}: {done.stderr[-600:]}")
            time.sleep(1)

    def stop(self) -> None:
        """Shut the node down and remove its folder."""
        if self.process is not None:
            try:
                self.ctl("shutdown", timeout_s=60, patient=False)
            except (OSError, subprocess.SubprocessError, AssertionError):
                pass
            stop_process(self.process, 15)
            self.process = None
            self.log.close()
        if self.base != Path():
            shutil.rmtree(self.base, ignore_errors=True)
