"""End to end (D16): the scheduler sends each retention policy and sweep to a real worker over RabbitMQ.
Under schedule.dev_fast they run at the scheduler's start: a file past its policy's max_age (grace 0s) is
retired, deleted and purged, a third-party object under a declared prefix is swept, and the file's name
is in no log."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest

from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import upload
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Rt55-old-export"


def test_scheduled_retention_and_sweep_end_to_end(role_env, start_role, db, tmp_path):
    policy = {"name": "chat-files", "purpose": "attachment", "max_age": "1h", "grace": "0s", "schedule": "0 3 * * *"}
    env = dict(
        role_env,
        LETHE_AUTH_JWT_SECRET=SECRET,
        LETHE_SCHEDULE_DEV_FAST="true",
        LETHE_RETENTION_POLICIES=json.dumps([policy]),
        LETHE_STORAGE_UNMANAGED_PREFIXES=json.dumps([{"prefix": "issues/", "schedule": "0 23 1 */3 *"}]),
    )
    root = env["LETHE_FILE_FS_ROOT"]
    os.makedirs(os.path.join(root, "issues"))
    old = os.path.join(root, "issues", "ticket-1.txt")
    with open(old, "w") as handle:
        handle.write("third party")
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    token = mint_token(SECRET, uuid.uuid4())

    # Given a complete file whose name carries the canary
    file_id = upload(f"{base}/api/v1", token, f"{CANARY}.txt", b"old chat file", worker=worker)
    # The roles run on the system clock: age the file's row instead of waiting (created and last changed 2h ago)
    db.unit_of_work(
        lambda uow: uow.conn.execute(
            "UPDATE files SET created_at = created_at - interval '2 hours', "
            "last_change_at = last_change_at - interval '2 hours' WHERE id = %s",
            (file_id,),
        ),
        name="test.age",
    )

    # When the scheduler starts (dev_fast: every schedule runs at once)
    scheduler = start_role(
        ["scheduler"],
        dict(env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "scheduler-metrics")),
    )

    # Then the file is retired, deleted and purged, and the old third-party object is swept
    deadline = time.monotonic() + 30
    while True:
        row = db.read(lambda conn: conn.execute("SELECT id FROM files WHERE id = %s", (file_id,)).fetchone())
        if row is None and not os.path.exists(old):
            break
        assert time.monotonic() < deadline, worker.tail() + scheduler.tail()
        time.sleep(0.2)
    assert not [name for _, _, names in os.walk(os.path.join(root, "f")) for name in names]
    assert os.path.isdir(os.path.join(root, "issues"))  # the prefix's own directory stays
    for role in (api, worker, scheduler):
        assert role.stop(signal.SIGTERM) == 0
    assert '"event": "retention.ran"' in worker.output() and '"event": "sweep.ran"' in worker.output()
    for role in (api, worker, scheduler):
        assert CANARY not in role.output()
