"""Behind PgBouncer in transaction mode (issue 23): the api and the worker run uploads, a message delete and
its purge, and the cleanup through it (no prepared statements, no session settings, advisory locks held by a
transaction); the scheduler's leader session goes direct (schedule.database_url), and without that key the
scheduler refuses to start."""

from __future__ import annotations

import signal
import sys
import time
import uuid

import pytest

from app.db.conn import one
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call, upload
from tests.support import zygote
from tests.support.pgbouncer import PgBouncer
from tests.support.ports import free_port
from tests.support.roles import wait_for_http, wait_for_output
from tests.support.services import start_or_missing

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"


@pytest.fixture
def pgbouncer(database_url):
    import shutil
    import tempfile
    from pathlib import Path

    # a directory the postgres user can reach (pytest's are private to the user running the tests)
    base = Path(tempfile.mkdtemp(prefix="lethe-pgbouncer-"))
    bouncer = start_or_missing(PgBouncer(base, database_url), "PgBouncer (Debian package pgbouncer)")
    yield bouncer
    bouncer.stop()
    shutil.rmtree(base, ignore_errors=True)


def test_the_roles_work_through_a_transaction_pooler(pgbouncer, role_env, start_role, database_url, db, tmp_path):
    pooled = dict(
        role_env,
        LETHE_DATABASE_URL=pgbouncer.url_for(database_url),
        LETHE_DATABASE_POOLER="transaction",
        LETHE_AUTH_JWT_SECRET=SECRET,
    )
    # Without a direct URL for its leader session the scheduler refuses to start, naming the key
    refused = zygote.run(
        [sys.executable, "-m", "app.entry", "scheduler"],
        capture_output=True,
        text=True,
        env=dict(pooled, LETHE_METRICS_PORT=str(free_port())),
        timeout=120,
    )
    assert refused.returncode == 2 and "schedule.database_url" in refused.stderr, refused.stderr
    api = start_role(["api"], pooled)
    worker = start_role(["worker"], dict(pooled, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")))
    scheduler = start_role(
        ["scheduler"],
        dict(
            pooled,
            LETHE_SCHEDULE_DATABASE_URL=database_url,
            LETHE_METRICS_PORT=str(free_port()),
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "scheduler-metrics"),
        ),
    )
    base = f"http://127.0.0.1:{pooled['LETHE_API_PORT']}"
    wait_for_http(base + "/readyz", api)
    wait_for_output(worker, '"event": "worker.started"')
    wait_for_output(worker, '"step": "l"')  # the cleanup the leader triggered at start ran through the pooler
    token = mint_token(SECRET, uuid.uuid4())
    api_v1 = base + "/api/v1"
    # Statements run again and again (psycopg would prepare them after five): none may meet the wrong session
    files = [upload(api_v1, token, f"note-{n}.txt", worker=worker) for n in range(8)]
    assert call("PUT", f"{api_v1}/messages/m-1", token, {"file_ids": files})[0] == 200
    assert call("DELETE", f"{api_v1}/messages/m-1", token)[0] == 204
    deadline = time.monotonic() + 20
    while db.read(
        lambda conn: (
            one(conn.execute("SELECT count(*) AS n FROM files WHERE id = ANY(%s)", ([uuid.UUID(f) for f in files],))).n
        )
    ):
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.1)
    for role in (api, worker, scheduler):
        assert role.stop(signal.SIGTERM) == 0, role.tail()
    for role in (api, worker):
        assert "prepared statement" not in role.output() and '"level": "ERROR"' not in role.output(), role.tail()
    assert '"event": "scheduler.leader"' in scheduler.output()
