"""Lethe's roles as real processes for the tests that start them (the e2e tests, the fault drills, the journeys):
a role with its output in a file, its start-up waits, its stop, and the queues emptied before it starts. A role
left running when pytest dies (a Ctrl-C, a `timeout`) is killed with its session."""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from tests.support import zygote
from tests.support.ports import free_port

_STARTED: list[Role] = []


def _kill_started_roles() -> None:
    """Every role runs in a session of its own, so nothing else kills it when pytest dies before its
    teardown (a Ctrl-C, a `timeout`): they would keep retrying against dead proxies and load the machine."""
    for role in _STARTED:
        role.kill()


def _on_sigterm(signum, frame) -> None:
    _kill_started_roles()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


atexit.register(_kill_started_roles)


if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _on_sigterm)


class Role:
    """A `lethe <role>` process with its output captured to a file, run in the folder of that file unless told
    otherwise (a role with the default `file.fs.root` must not write into the checkout)."""

    def __init__(self, args, env, log_path, cwd=None):
        self.name = args[0]
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.signalled = False  # stop_roles sent the stop signal already
        folder = str(cwd if cwd is not None else log_path.parent)
        self.proc: subprocess.Popen[bytes] | zygote.ZygoteProcess
        if zygote.can_fork(folder, env):
            self.proc = zygote.start(list(args), env, folder, self.log)
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app.entry", *args],
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=folder,
            )
        _STARTED.append(self)

    def tail(self, chars: int = 4000) -> str:
        """Which role, and the end of its output: what a failing assertion shows."""
        return f"--- lethe {self.name} (pid {self.proc.pid}, exit {self.proc.poll()}) ---\n{self.output()[-chars:]}"

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return open(self.log_path, encoding="utf-8", errors="replace").read()

    def kill(self) -> None:
        """SIGKILL the role's whole session: its children (gunicorn and dramatiq workers) must not outlive it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(10)

    def stop(self, sig=signal.SIGTERM, timeout=30) -> int:
        if self.proc.poll() is None:
            if not self.signalled:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
                raise AssertionError(f"the role did not stop on {sig!r}:\n{self.tail()}") from None
        self.log.close()
        code = self.proc.returncode
        assert code is not None
        return code


def stop_roles(roles, sig=signal.SIGTERM, timeout=30) -> list[int]:
    """Stop roles at once: each gets its signal, then each is waited for (a worker's graceful stop takes three
    seconds; one role after another, their stops add up)."""
    for role in roles:
        if role.proc.poll() is None:
            role.proc.send_signal(sig)
            role.signalled = True
    return [role.stop(sig, timeout) for role in roles]


def wait_for_http(url: str, role: Role, timeout: float = 60, status: int = 200) -> bytes:
    """Poll a URL until it answers `status` (a start-up wait, bounded; not a window of the product)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if role.proc.poll() is not None:
            raise AssertionError(f"the role exited with {role.proc.returncode}:\n{role.tail()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == status:
                    return response.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer {status} in {timeout}s ({last}):\n{role.tail()}")


def purge_queues(broker_url: str) -> None:
    """Empty Lethe's queues on the shared RabbitMQ, so that no message of an earlier test reaches this one's
    worker."""
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(broker_url))
    try:
        for queue in ("maintenance", "scan", "webhooks"):
            for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
                channel = connection.channel()
                try:
                    channel.queue_purge(name)
                except pika.exceptions.ChannelClosedByBroker:
                    pass  # not declared yet
    finally:
        connection.close()


def start_api(start_role, env: dict[str, Any]) -> Role:
    """`lethe api` on env's port, or (when another process took that port before gunicorn bound it) on another
    one, written back into env: the test must never talk to whatever else holds the port."""
    for _ in range(3):
        api = start_role(["api"], env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            output = api.output()
            if "Listening at:" in output:
                return api
            if "Connection in use" in output or api.proc.poll() is not None:
                break
            time.sleep(0.1)
        api.kill()
        env["LETHE_API_PORT"] = str(free_port())
    raise AssertionError("the api could not bind a port")


def start_api_and_worker(start_role, env: dict[str, Any], tmp_path) -> tuple[Role, Role, str]:
    """The api and a worker on the roles' environment, both ready (the worker's metrics in a directory of its
    own); returns them and the api's base URL."""
    api = start_api(start_role, env)
    worker = start_role(["worker"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")))
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    wait_for_http(base + "/readyz", api)
    wait_for_output(worker, '"event": "worker.started"')
    return api, worker, base


def wait_for_output(role: Role, text: str, timeout: float = 60) -> None:
    """Poll a role's output until it holds `text` (bounded start-up wait)."""
    deadline = time.monotonic() + timeout
    while text not in role.output():
        if role.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared:\n{role.tail()}")
        time.sleep(0.2)


def with_driver(env: dict[str, Any], driver: str, request):
    """The roles' environment for a storage driver: on s3, a fresh bucket of moto's server. Returns (env,
    the S3 store or None)."""
    if driver != "s3":
        return dict(env, LETHE_FILE_STORAGE_DRIVER=driver), None
    from tests.support.stores import make_s3_store

    endpoint = request.getfixturevalue("moto_server")
    store = make_s3_store(endpoint)
    return dict(
        env,
        LETHE_FILE_STORAGE_DRIVER="s3",
        LETHE_FILE_S3_ENDPOINT=endpoint,
        LETHE_FILE_S3_BUCKET=store.bucket,
        LETHE_FILE_S3_ACCESS_KEY="testing",
        LETHE_FILE_S3_SECRET_KEY="testing",
        LETHE_FILE_S3_REGION="us-east-1",
        LETHE_FILE_S3_SECURE="false",
    ), store
