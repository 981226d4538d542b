"""The suite's roles and commands forked from a zygote (tests/support/zygote.py) behave as the plain processes they
stand for: the same exit codes and output, the role's environment, folder and session, the exit code a signal
gives; a folder or PYTHONPATH with another checkout's code is run as a plain process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.support import zygote
from tests.support.keyring import SEALED_ENV
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.one_store

LETHE = [sys.executable, "-m", "app.entry"]


@pytest.fixture(autouse=True)
def forking(monkeypatch):
    """The zygote on, whatever the run says (LETHE_TEST_ZYGOTE=0 makes the rest of the suite plain)."""
    monkeypatch.setenv("LETHE_TEST_ZYGOTE", "1")


def bare_env(**more: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1", **more}


@pytest.mark.parametrize(
    "args, env",
    [
        (["config", "check"], bare_env(LETHE_DATABASE_URL="postgresql://x@127.0.0.1:1/x", LETHE_API_PORT="-3")),
        (["token", "--sub", "not-a-uuid"], bare_env()),
        (["no-such-command"], bare_env()),
        (["receipt", "--help"], bare_env()),
    ],
)
def test_a_forked_command_answers_as_a_plain_one(args, env, tmp_path, monkeypatch):
    forked = zygote.run([*LETHE, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    monkeypatch.setenv("LETHE_TEST_ZYGOTE", "0")
    plain = zygote.run([*LETHE, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert forked.returncode in (0, 2)
    assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)


def test_a_forked_role_serves_in_its_folder_environment_and_session_and_a_signal_ends_it(
    database_url, broker_url, tmp_path
):
    port = free_port()
    env = bare_env(
        LETHE_DATABASE_URL=database_url,
        LETHE_BROKER_URL=broker_url,  # an api that only starts publishes nothing
        LETHE_AUTH_JWT_SECRET="zygote-secret-of-sufficient-length-0123456789",
        LETHE_FILE_FS_ROOT=str(tmp_path / "objects"),
        LETHE_API_PORT=str(port),
        LETHE_METRICS_PORT=str(free_port()),
        LETHE_API_WORKERS="1",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
        **SEALED_ENV,  # the keyring of the files other tests sealed in this database
    )
    api = Role(["api"], env, tmp_path / "api.log")
    try:
        assert isinstance(api.proc, zygote.ZygoteProcess)
        wait_for_http(f"http://127.0.0.1:{port}/readyz", api)  # on the port of its environment
        metrics = wait_for_http(f"http://127.0.0.1:{port}/metrics", api).decode()
        assert 'route="/readyz",status="200"' in metrics  # counted in the role's own multiprocess directory
        assert any(name.endswith(".db") for name in os.listdir(tmp_path / "metrics"))
        assert os.getsid(api.proc.pid) == api.proc.pid  # a session of its own, as start_new_session gives
        assert os.readlink(f"/proc/{api.proc.pid}/cwd") == str(tmp_path)
        with pytest.raises(subprocess.TimeoutExpired):
            api.proc.wait(0.01)
        os.killpg(api.proc.pid, signal.SIGKILL)
        assert api.proc.wait(30) == -signal.SIGKILL  # as Popen reports a process a signal ended
    finally:
        api.kill()


def test_a_folder_or_pythonpath_with_another_checkout_runs_a_plain_process(tmp_path):
    (tmp_path / "app" / "entry").mkdir(parents=True)
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "entry" / "__init__.py").write_text("")
    (tmp_path / "app" / "entry" / "__main__.py").write_text("print('the other checkout')\n")
    assert not zygote.can_fork(str(tmp_path), {})
    assert not zygote.can_fork(str(tmp_path.parent), {"PYTHONPATH": str(tmp_path)})
    assert zygote.can_fork(str(tmp_path.parent), {"PYTHONPATH": str(zygote.ROOT)})
    role = Role(["--help"], bare_env(), tmp_path / "help.log", cwd=tmp_path)
    assert isinstance(role.proc, subprocess.Popen)
    assert role.proc.wait(60) == 0 and role.output() == "the other checkout\n"


def test_the_output_of_a_forked_role_reaches_its_log_and_its_exit_code_the_test(tmp_path):
    role = Role(["config", "check"], bare_env(LETHE_API_PORT="-3"), tmp_path / "check.log")
    assert isinstance(role.proc, zygote.ZygoteProcess)
    assert role.proc.wait(60) == 2
    assert "api.port" in role.output()
