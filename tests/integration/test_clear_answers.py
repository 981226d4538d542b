"""Clear answers to a new user's careless requests (issue 21)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.lifecycle.cleanup import run_cleanup
from tests.support import zygote
from tests.support.helpers import problem, rows
from tests.support.lethe import ALEX, SAM


@pytest.mark.one_store
def test_a_deleted_message_id_answers_409_until_its_tombstone_goes(make_lethe):
    lethe = make_lethe(**{"privacy.message_tombstone_ttl": "30d"})
    file_id = lethe.upload(ALEX)
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [file_id]}).status_code == 200
    assert lethe.call("DELETE", "/api/v1/messages/m-1", ALEX).status_code == 204
    # Reusing the id says why (it was a bare 404 without a reason)
    again = lethe.upload(ALEX)
    problem(
        lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [again]}), 409, "conflict", "message_deleted"
    )
    assert lethe.call("DELETE", "/api/v1/messages/m-1", ALEX).status_code == 204  # a repeated delete
    # Sam's own m-1 is another message (ids are scoped by author)
    assert lethe.call("PUT", "/api/v1/messages/m-1", SAM, json={"file_ids": []}).status_code == 200
    # The tombstone (author and id) is removed by the cleanup after privacy.message_tombstone_ttl
    lethe.clock.advance(timedelta(days=30) - timedelta(seconds=1))
    assert run_cleanup(lethe.rt).step("l").acted == 0
    lethe.clock.advance(timedelta(seconds=1))
    assert run_cleanup(lethe.rt, dry_run=True).step("l").acted == 1
    assert run_cleanup(lethe.rt).step("l").acted == 1
    assert [(row.author_id, row.id) for row in rows(lethe, "messages")] == [(SAM.id, "m-1")]
    problem(lethe.call("DELETE", "/api/v1/messages/m-1", ALEX), 404, "not_found")  # gone: treat 404 as done
    fresh = lethe.upload(ALEX)  # (`again`, never attached, went by step b meanwhile)
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [fresh]}).status_code == 200


def test_operator_commands_say_what_is_wrong_with_the_database(database_url, tmp_path):
    """Issue 21, point 6: PoolTimeout and UndefinedTable tracebacks, with the URL's password at risk."""
    import os
    import sys
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    def cleanup_with(url: str) -> str:
        result = zygote.run(
            [sys.executable, "-m", "app.entry", "cleanup", "--dry-run"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                "PATH": os.environ.get("PATH", ""),
                "LETHE_DATABASE_URL": url,
                "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
            },
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert "database.url" in output and "Traceback" not in output and "s3cret-canary" not in output
        return output

    parts = urlsplit(database_url)
    with_password = parts._replace(
        netloc=f"{parts.username or 'postgres'}:s3cret-canary@{parts.hostname}:{parts.port or 5432}"
    )
    assert "cannot connect" in cleanup_with("postgresql://lethe:s3cret-canary@127.0.0.1:1/lethe")
    unknown = f"lethe_missing_{uuid.uuid4().hex[:8]}"
    assert "does not exist" in cleanup_with(urlunsplit(with_password._replace(path="/" + unknown)))
    empty = f"lethe_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{empty}"')
    try:
        said = cleanup_with(urlunsplit(parts._replace(path="/" + empty)))
        assert "not migrated" in said and "lethe migrate" in said
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{empty}" WITH (FORCE)')


def test_an_authentication_failure_is_named():
    from app.entry.support import _connect_failure

    assert "authentication failed" in _connect_failure("28P01")
    assert "does not exist" in _connect_failure("3D000")
    assert "cannot connect" in _connect_failure(None)


@pytest.mark.one_store
def test_clamd_down_is_an_outage_warning_and_readyz_says_the_scanner_is_degraded(make_lethe, clamd, caplog):
    """Issue 21, point 8: every retry logged an ERROR with a traceback, and nothing said clamd was unreachable."""
    import logging

    import dramatiq
    from dramatiq.brokers.stub import StubBroker

    from tests.support.ports import free_port
    from workers.actors import register

    down = make_lethe(**{"scan.clamd_address": f"127.0.0.1:{free_port()}", "scan.timeout": "2s"})
    file_id = down.upload(ALEX, scan=False)
    actors = register(StubBroker(), down.rt)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        with pytest.raises(dramatiq.Retry):
            actors["scan_file"].fn(file_id)
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "worker.dependency_unavailable"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # /readyz stays 200 (uploads and scanned downloads work) and names the scanner as degraded
    ready = down.call("GET", "/readyz")
    assert ready.status_code == 200 and ready.json == {"status": "ready", "degraded": ["scanner"]}
    up = make_lethe(**{"scan.clamd_address": clamd.address})
    assert up.call("GET", "/readyz").json == {"status": "ready"}
