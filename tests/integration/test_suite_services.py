"""The suite and its services (issue 14): a missing test database is no obstacle, a server that is down is
named, loudly, and CI never turns it into a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from app.entry.embedded_pg import free_port

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/integration/test_db.py::test_an_attachment_restricts_the_file_and_a_file_is_attached_once"


def run_suite(database_url: str, ci: bool) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("CI", "DATABASE_URL")}
    env["DATABASE_URL"] = database_url
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", PROBE], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def server_url():
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.skip("runs against the DATABASE_URL server (the embedded one has no second database to name)")
    return url


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
