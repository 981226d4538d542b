"""The suite and its services (issue 14): a missing test database is no obstacle, a server that is down is
named, loudly, and CI never turns it into a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/integration/test_db.py::test_an_attachment_restricts_the_file_and_a_file_is_attached_once"


def run_suite(database_url: str, ci: bool) -> subprocess.CompletedProcess[Any]:
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "DATABASE_URL")}
    env["DATABASE_URL"] = database_url
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def server_url(postgres_server):
    return postgres_server


BARE = [
    "tests/integration/test_lifecycle_plans.py",
    "tests/integration/test_db.py",
    "tests/integration/test_broker.py",
    "tests/unit/test_one_rule.py",
]


def test_a_machine_with_nothing_but_python_passes_with_its_missing_services_named():
    """`make test` on a bare machine: no DATABASE_URL (the suite starts its embedded PostgreSQL), no RabbitMQ (a
    port nothing listens on), not CI. Every test that needs no missing service passes, every other one is
    skipped with a SERVICE MISSING line; nothing errors."""
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "DATABASE_URL", "BROKER_URL")}
    env["BROKER_URL"] = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *BARE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " error" not in result.stdout.splitlines()[-1] and "passed" in result.stdout.splitlines()[-1], tail
    assert "SERVICE MISSING: RabbitMQ (BROKER_URL)" in result.stdout, tail


def test_a_database_that_does_not_exist_in_the_url_is_no_obstacle(server_url):
    parts = urlsplit(server_url)
    missing = urlunsplit(parts._replace(path="/no_such_database_for_lethe"))
    result = run_suite(missing, ci=False)
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout + result.stderr
    assert "skipped" not in result.stdout


def test_a_server_that_is_down_is_named_loudly_and_fails_in_ci(server_url):
    parts = urlsplit(server_url)
    down = urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{free_port()}"))
    local = run_suite(down, ci=False)
    assert "1 skipped" in local.stdout and "SERVICE MISSING: PostgreSQL (DATABASE_URL)" in local.stdout
    assert "cannot connect to the server: OperationalError" in local.stdout
    in_ci = run_suite(down, ci=True)
    assert in_ci.returncode != 0 and "CI must not skip" in in_ci.stdout
