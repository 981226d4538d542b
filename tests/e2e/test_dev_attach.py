"""Operator commands next to `make run` (issue 14, point 3): while `lethe dev` runs, a command run from the
same folder finds its database and store through ./.lethe/; elsewhere the error says what to run."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support import zygote
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def lethe(args, cwd, env):
    return zygote.run(
        [sys.executable, "-m", "app.entry", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_operator_commands_find_the_running_dev_server(database_url, tmp_path):
    here, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    base_env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    port = free_port()
    dev = Role(
        ["dev", "--port", str(port)], dict(base_env, LETHE_DATABASE_URL=database_url), tmp_path / "dev.log", cwd=here
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", dev)
        assert (here / ".lethe" / "dev.json").exists()
        assert oct((here / ".lethe" / "dev.json").stat().st_mode & 0o777) == "0o600"
        # Without LETHE_DATABASE_URL, from the same folder: it finds the dev server
        cleanup = lethe(["cleanup", "--dry-run"], here, base_env)
        assert cleanup.returncode == 0, cleanup.stderr
        assert "dry run" in cleanup.stdout
        token = lethe(["token", "--sub", "2f9a7c4e-8a39-4c53-9a43-3f2f0b1d6a11"], here, base_env)
        assert token.returncode == 0 and token.stdout.count(".") == 2
        # `lethe config check` checks the running instance's configuration, as every operator command finds it:
        # its keyring too, once a sealed file needs one of its keys
        import uuid as uuids

        from app.entry.token import mint_token
        from tests.e2e.test_deletion_e2e import upload

        user_token = mint_token(
            (here / ".lethe" / "jwt_secret").read_text().strip(), uuids.uuid4(), ("files:read", "files:write")
        )
        upload(f"http://127.0.0.1:{port}/api/v1", user_token, "sealed.txt")
        check = lethe(["config", "check"], here, base_env)
        assert check.returncode == 0 and "OK" in check.stdout, check.stdout + check.stderr
        # Read-only commands say nothing of a broker: they commit no job
        for command in (
            ["cleanup", "--dry-run"],
            ["audit"],
            ["hold", "list"],
            ["webhooks", "list"],
            ["receipt", "2f9a7c4e-8a39-4c53-9a43-3f2f0b1d6a11"],
        ):
            said = lethe(command, here, base_env)
            assert "broker.url" not in said.stderr and "relay" not in said.stderr, (command, said.stderr)
        # From another folder: exit 2, saying exactly what to do
        lost = lethe(["cleanup"], elsewhere, base_env)
        assert lost.returncode == 2 and "make run" in lost.stderr and "LETHE_DATABASE_URL=" in lost.stderr
        no_secret = lethe(["token", "--sub", "2f9a7c4e-8a39-4c53-9a43-3f2f0b1d6a11"], elsewhere, base_env)
        assert no_secret.returncode == 2 and "--state-dir" in no_secret.stderr
        # ... and config check there names the missing signing key once
        unconfigured = lethe(["config", "check"], elsewhere, base_env)
        assert unconfigured.returncode == 2 and unconfigured.stdout.count("Required") == 1
    finally:
        dev.stop(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while (here / ".lethe" / "dev.json").exists():
        assert time.monotonic() < deadline, "lethe dev left its dev.json behind"
        time.sleep(0.1)
    # Once it stopped, the same folder gets the same clear error (a stale file is ignored too)
    assert lethe(["cleanup"], here, base_env).returncode == 2
    stopped = lethe(["config", "check"], here, base_env)
    assert stopped.returncode == 2 and "no `make run`" in stopped.stdout and "Required" not in stopped.stdout, (
        stopped.stdout
    )


def test_a_port_in_use_says_how_to_pick_another(database_url, tmp_path):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        result = zygote.run(
            [sys.executable, "-m", "app.entry", "dev", "--port", str(taken.getsockname()[1])],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "LETHE_DATABASE_URL": database_url},
        )
    finally:
        taken.close()
    assert result.returncode == 2
    assert "is in use" in result.stderr and "--port" in result.stderr and "PORT=" in result.stderr


def test_a_second_make_run_in_the_same_folder_says_one_is_running(database_url, tmp_path):
    """Issue 21, point 7: it suggested another port, then died with the embedded PostgreSQL's traceback."""
    here = tmp_path / "project"
    here.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "LETHE_DATABASE_URL": database_url}
    port = free_port()
    first = Role(["dev", "--port", str(port)], env, tmp_path / "dev.log", cwd=here)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", first)
        for args in (["dev", "--port", str(port)], ["dev", "--port", str(free_port())]):
            second = lethe(args, here, env)
            assert second.returncode == 2, second.stderr
            assert "already running" in second.stderr and f"pid {first.proc.pid}" in second.stderr
            assert f"127.0.0.1:{port}" in second.stderr and "Traceback" not in second.stderr + second.stdout
    finally:
        first.stop(signal.SIGTERM)
