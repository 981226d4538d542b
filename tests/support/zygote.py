"""Lethe's roles and commands forked from a process that has already imported their libraries.

Each `python -m app.entry ...` the suite starts spends most of its first second importing Flask, psycopg,
dramatiq, gunicorn, marshmallow and the rest; the suite starts several hundred of them. A zygote (one per pytest
process, started at the first role) imports those libraries once, then forks a child per role: the child takes the
role's environment, working directory, standard streams and session, and runs `app.entry` as `python -m` does
(`runpy`, as `__main__`). It is a real process of its own: its pid takes signals, its exit code comes back to the
test, its output goes to the test's file.

What the zygote imports is what holds no state of the environment: every library, and each module of `app`
that imports without prometheus_client (which picks its multiprocess mode from the environment when imported;
a role settles that itself, so prometheus_client and the modules that import it load in the child, as in a real
start). Roles whose interpreters would differ (a `PYTHON*` variable such as PYTHONUNBUFFERED, a dramatiq or
psycopg variable read at import) fork from zygotes of their own, each started with those values. A role whose
working folder holds another checkout's `app/` (an older release) is started as a plain process, as is every
role when LETHE_TEST_ZYGOTE=0.

Run as `python -m tests.support.zygote SOCKET`: it serves on that Unix socket until its parent is gone.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# The variables read when an interpreter starts or a library is imported: roles that differ in any of them are
# forked from zygotes of their own, each started with the role's values.
_READ_AT_IMPORT = ("PYTHON", "dramatiq_", "PSYCOPG_")

_LIBRARIES = (
    "apscheduler.schedulers.blocking",
    "apscheduler.triggers.interval",
    "cryptography.hazmat.primitives.ciphers.aead",
    "dramatiq",
    "dramatiq.brokers.rabbitmq",
    "dramatiq.cli",
    "dramatiq.worker",
    "flask",
    "flask_smorest",
    "gunicorn.app.base",
    "gunicorn.arbiter",
    "gunicorn.workers.sync",
    "gunicorn.workers.gthread",
    "jwt",
    "marshmallow",
    "minio",
    "opentelemetry.trace",
    "pika",
    "psycopg",
    "psycopg_pool",
    "sentry_sdk",
    "urllib3",
    "werkzeug",
)


# -- the zygote ------------------------------------------------------------------------------------------------


class _NoPrometheus:
    """Refuses prometheus_client while the zygote imports: a module that needs it is left for the child."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "prometheus_client" or name.startswith("prometheus_client."):
            raise ImportError(f"{name} is imported by the role itself")
        return None


def _preload() -> None:
    import importlib
    import pkgutil

    blocker = _NoPrometheus()
    sys.meta_path.insert(0, blocker)
    try:
        for name in _LIBRARIES:
            try:
                importlib.import_module(name)
            except ImportError:
                pass  # an optional library not installed here: the child imports what it needs
        import app

        for info in pkgutil.walk_packages(app.__path__, "app."):
            if info.name.endswith("__main__"):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass  # needs prometheus_client: the child imports it
    finally:
        sys.meta_path.remove(blocker)
    # Nothing of what was imported may have started a thread or chosen a broker: a fork copies neither well.
    assert threading.active_count() == 1, threading.enumerate()
    assert "prometheus_client" not in sys.modules
    import dramatiq.broker

    assert dramatiq.broker.global_broker is None


def _recv(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    (length,) = struct.unpack("!I", head)
    body = b""
    while len(body) < length:
        chunk = conn.recv(length - len(body))
        if not chunk:
            raise EOFError("the test closed the connection")
        body += chunk
    return json.loads(body), list(fds)


def _serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Fork a child per request; report each child's exit on its request's connection. Returns only in a child:
    the request it is to run."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        try:
            readable, _, _ = select.select([listener.fileno(), wake_r], [], [], 1.0)
        except InterruptedError:
            readable = []
        if os.getppid() != parent:
            for pid in children:
                _kill_session(pid)
            os._exit(0)
        if wake_r in readable:
            os.read(wake_r, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
                except OSError:
                    pass  # the test went away
                conn.close()
        if listener.fileno() in readable:
            conn, _ = listener.accept()
            try:
                request, fds = _recv(conn)
            except (OSError, EOFError, ValueError):
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_r, wake_w):
                    os.close(fd)
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                return request, fds
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            try:
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            except OSError:
                _kill_session(pid)  # the test went away before it learnt the pid: nobody would stop the child
                os.kill(pid, signal.SIGKILL)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: the role's session, streams, folder, environment and arguments, then `python -m app.entry`."""
    import runpy

    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` puts the working folder first
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("app.entry", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        _end_as_the_interpreter_does(None)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # how an interpreter ends on an uncaught Ctrl-C
        code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    _end_as_the_interpreter_does(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _end_as_the_interpreter_does(code: int | None) -> None:
    """Wait for the threads that are not daemons, run the atexit functions, flush the streams, then exit without
    tearing down every module the zygote imported (that teardown was more than half of a forked command's CPU)."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if code is not None:
        os._exit(code)


# -- the tests' side -------------------------------------------------------------------------------------------


class ZygoteProcess:
    """The part of subprocess.Popen the roles use, for a child of the zygote."""

    def __init__(self, conn: socket.socket, args: list[str]) -> None:
        self.args = args
        self._conn = conn
        self._file = conn.makefile("rb")
        self.pid: int = json.loads(self._file.readline())["pid"]
        self.returncode: int | None = None

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        readable, _, _ = select.select([self._conn], [], [], timeout)
        if not readable:
            return False
        line = self._file.readline()
        self.returncode = json.loads(line)["exit"] if line else -signal.SIGKILL  # the zygote died: so did it
        self._file.close()
        self._conn.close()
        return True

    def poll(self) -> int | None:
        self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    def __init__(self, interpreter: tuple[tuple[str, str], ...]) -> None:
        self._dir = tempfile.mkdtemp(prefix="lethe-zygote-")
        self.path = os.path.join(self._dir, "socket")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", *_READ_AT_IMPORT))}
        env.update(interpreter)
        self._log = open(os.path.join(self._dir, "zygote.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.zygote", self.path],
            env=env,
            cwd=str(ROOT),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            self.proc.wait(10)
            raise RuntimeError(f"the zygote did not start: {Path(self._dir, 'zygote.log').read_text()}")

    def spawn(self, args: list[str], env: dict[str, str], cwd: str, fds: tuple[int, int, int], new_session: bool):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        body = json.dumps({"args": args, "env": env, "cwd": cwd, "new_session": new_session}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(body))], list(fds))
        conn.sendall(body)
        return ZygoteProcess(conn, args)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


# One zygote per set of the variables an interpreter reads when it starts (PYTHONUNBUFFERED, PYTHONPATH, ...).
_ZYGOTES: dict[tuple[tuple[str, str], ...], _Zygote] = {}


def _close_all() -> None:
    for running in _ZYGOTES.values():
        running.close()


atexit.register(_close_all)


_STARTING = threading.Lock()  # tests start roles from threads of their own too


def _zygote(env: dict[str, str]) -> _Zygote:
    interpreter = tuple(sorted((k, v) for k, v in env.items() if k.startswith(_READ_AT_IMPORT)))
    with _STARTING:
        running = _ZYGOTES.get(interpreter)
        if running is None or running.proc.poll() is not None:
            running = _ZYGOTES[interpreter] = _Zygote(interpreter)
        return running


def can_fork(cwd: str, env: dict[str, str]) -> bool:
    """Whether a role started in this folder with this environment would import the modules the zygote did (not
    another checkout's, from its folder or PYTHONPATH)."""
    if os.environ.get("LETHE_TEST_ZYGOTE", "1") == "0":
        return False
    paths = [Path(entry).resolve() for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if any(path != ROOT and (path / "app").exists() for path in paths):
        return False
    here = Path(cwd).resolve()
    return here == ROOT or not (here / "app").exists()


def start(args: list[str], env: dict[str, str], cwd: str, stdout: Any, new_session: bool = True) -> ZygoteProcess:
    """`python -m app.entry *args`, forked from the zygote, with stdout and stderr into `stdout` (a file)."""
    with open(os.devnull, "rb") as devnull:
        return _zygote(env).spawn(
            args, env, cwd, (devnull.fileno(), stdout.fileno(), stdout.fileno()), new_session=new_session
        )


_RUN_OPTIONS = {"capture_output", "text", "env", "timeout", "cwd", "check"}


def run(command: list[str], **options: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run for `[sys.executable, "-m", "app.entry", ...]`: the command forked from the zygote when it
    can be (the options above only), else run as a plain process."""
    cwd = str(options.get("cwd") or os.getcwd())
    env = {k: str(v) for k, v in (options.get("env") or os.environ).items()}
    ours = list(command[:3]) == [sys.executable, "-m", "app.entry"] and set(options) <= _RUN_OPTIONS
    if not ours or not can_fork(cwd, env):
        return subprocess.run(command, **options)
    capture = options.get("capture_output", False)
    pipes = [os.pipe(), os.pipe()] if capture else []
    with open(os.devnull, "rb") as devnull:
        fds = (devnull.fileno(), pipes[0][1], pipes[1][1]) if capture else (devnull.fileno(), 1, 2)
        child = _zygote(env).spawn([str(arg) for arg in command[3:]], env, cwd, fds, new_session=False)
    for _, write in pipes:
        os.close(write)
    timeout = options.get("timeout")
    outputs = [b"", b""]
    try:
        if capture:
            outputs = _read_all([read for read, _ in pipes], timeout)
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait(10)
        raise subprocess.TimeoutExpired(command, timeout or 0) from None
    finally:
        for read, _ in pipes:
            os.close(read)
    out: Any = None
    err: Any = None
    if capture:
        out, err = outputs
        if options.get("text"):
            out, err = (_text(data) for data in outputs)
    assert child.returncode is not None
    done = subprocess.CompletedProcess(command, child.returncode, out, err)
    if options.get("check"):
        done.check_returncode()
    return done


def _read_all(fds: list[int], timeout: float | None) -> list[bytes]:
    """Both pipes to their ends (as communicate does), within the timeout."""
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    open_fds = list(fds)
    while open_fds:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise subprocess.TimeoutExpired("lethe", timeout or 0)
        readable, _, _ = select.select(open_fds, [], [], left)
        for fd in readable:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
    return [b"".join(chunks[fd]) for fd in fds]


def _text(data: bytes) -> str:
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    _preload()
    _request, _fds = _serve(sys.argv[1])
    del _preload, _serve
    _become(_request, _fds)
