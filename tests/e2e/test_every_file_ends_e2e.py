"""Issue 20 end to end, with real processes: a scan lost when `lethe dev` is killed mid-scan reaches an end
after a restart (before, the file stayed `pending` for good: the in-process broker died with its job)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from app.db.conn import one
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call
from tests.support import zygote
from tests.support.fakes import FakeClamd
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SECRET = "e2e-secret-of-sufficient-length-0123456789"


def test_a_scan_lost_with_lethe_dev_reaches_clean_after_a_restart(database_url, tmp_path):
    clamd = FakeClamd()
    clamd.mode = "hold"  # clamd holds the bytes: the scan is in flight
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_SCAN_CLAMD_ADDRESS": clamd.address,
        # the product's windows, shortened for the drill: a pending scan is sent again after 2s, and the
        # cleanup runs every 2s (and once at start)
        "LETHE_SCAN_PENDING_TTL": "2s",
        "LETHE_FILE_GC_INTERVAL": "2s",
    }
    api_v1 = f"http://127.0.0.1:{port}/api/v1"
    token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
    here = tmp_path / "project"
    here.mkdir()
    first = Role(["dev", "--port", str(port)], env, tmp_path / "dev-1.log", cwd=here)
    second = None
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", first)
        # Given a complete upload whose scan is in flight when lethe dev is killed
        status, created = call(
            "POST", f"{api_v1}/uploads", token, {"name": "scan-me.txt", "size_bytes": 5, "mime_type": "text/plain"}
        )
        assert status == 201, created
        file_id = created["file"]["id"]
        assert call("PUT", f"{api_v1}/uploads/{file_id}/parts/1", token, raw=b"hello")[0] == 200
        assert call("POST", f"{api_v1}/uploads/{file_id}/complete", token)[0] == 200
        assert clamd.started_event.wait(30), first.tail()
        first.kill()
        clamd.mode = "ok"
        clamd.release()
        # When it starts again (its job is gone with the in-process broker)
        second = Role(["dev", "--port", str(port)], env, tmp_path / "dev-2.log", cwd=here)
        wait_for_http(f"http://127.0.0.1:{port}/readyz", second)
        # Then within scan.pending_ttl plus a cleanup interval the scan is sent again and the file is clean
        deadline = time.monotonic() + 30
        while call("GET", f"{api_v1}/files/{file_id}", token)[1]["scan_status"] == "pending":
            assert time.monotonic() < deadline, second.tail()
            time.sleep(0.2)
        assert call("GET", f"{api_v1}/files/{file_id}", token)[1]["scan_status"] == "clean"
        assert "scan.resent" in second.output()
    finally:
        if second is not None:
            second.stop(signal.SIGTERM)
        first.kill()
        clamd.close()


def test_retention_run_without_a_broker_purges_through_the_relay_of_a_running_lethe_dev(database_url, tmp_path):
    """Issue 20: `lethe retention run` with the database named and no broker published to an in-process broker
    nobody consumed, and deleted the outbox rows as if sent: files marked deleted kept their objects and rows."""
    import json
    import sys

    import psycopg

    port = free_port()
    here = tmp_path / "project"
    here.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(here / "objects"),
        # the relay's windows, shortened for the drill
        "LETHE_OUTBOX_RELAY_INTERVAL": "1s",
        "LETHE_OUTBOX_RELAY_AGE": "1s",
    }
    api_v1 = f"http://127.0.0.1:{port}/api/v1"
    owner = uuid.uuid4()
    token = mint_token(SECRET, owner, ("files:read", "files:write", "manage"))
    dev = Role(["dev", "--port", str(port)], env, tmp_path / "dev.log", cwd=here)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", dev)
        status, created = call(
            "POST",
            f"{api_v1}/uploads",
            token,
            {"name": "export.zip", "size_bytes": 5, "mime_type": "application/zip", "purpose": "gdpr_export"},
        )
        assert status == 201, created
        file_id = created["file"]["id"]
        assert call("PUT", f"{api_v1}/uploads/{file_id}/parts/1", token, raw=b"bytes")[0] == 200
        assert call("POST", f"{api_v1}/uploads/{file_id}/complete", token)[0] == 200
        deadline = time.monotonic() + 20
        while call("GET", f"{api_v1}/files/{file_id}", token)[1]["scan_status"] == "pending":
            assert time.monotonic() < deadline, dev.tail()
            time.sleep(0.1)
        with psycopg.connect(database_url, autocommit=True) as conn:  # the export is 40 days old
            conn.execute("UPDATE files SET last_change_at = now() - interval '40 days' WHERE id = %s", (file_id,))
        # When an operator runs the policy from a shell that names the database but no broker
        policy = [
            {"name": "exports", "purpose": "gdpr_export", "max_age": "30d", "grace": "0s", "schedule": "0 0 * * *"}
        ]
        operator_env = {k: v for k, v in env.items() if not k.startswith("LETHE_OUTBOX")}
        result = zygote.run(
            [sys.executable, "-m", "app.entry", "retention", "run"],
            cwd=tmp_path,
            env=dict(operator_env, LETHE_RETENTION_POLICIES=json.dumps(policy)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "outbox" in result.stderr
        # Then lethe dev's relay sends the purge and the file is gone: row and objects
        assert call("GET", f"{api_v1}/files/{file_id}", token)[0] == 404  # deleted at once
        deadline = time.monotonic() + 30
        with psycopg.connect(database_url, autocommit=True) as conn:
            while one(conn.execute("SELECT count(*) FROM files WHERE id = %s", (file_id,)))[0]:
                assert time.monotonic() < deadline, dev.tail()
                time.sleep(0.2)
        assert not [p for p in (here / "objects").rglob("*") if file_id in str(p) and p.is_file()]
    finally:
        dev.stop(signal.SIGTERM)
