"""End to end (D16): an erasure with api, worker and scheduler as real processes on PostgreSQL and RabbitMQ,
with each driver. Afterwards no row, object, event payload or log line holds the subject's files' names,
text or id, and another user's file is untouched."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest

from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call, objects_of, upload
from tests.support.ports import free_port
from tests.support.roles import wait_for_http, wait_for_output, with_driver

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Ex93-therapy-notes"


@pytest.mark.parametrize("driver", ["fs", "s3"])
def test_erase_a_person_end_to_end(driver, role_env, start_role, db, tmp_path, request):
    env, store = with_driver(dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET), driver, request)
    api = start_role(["api"], env)
    worker = start_role(["worker"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")))
    scheduler = start_role(
        ["scheduler"],
        dict(env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "scheduler-metrics")),
    )
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    wait_for_http(base + "/readyz", api)
    wait_for_output(worker, '"event": "worker.started"')
    api_v1 = base + "/api/v1"
    subject, other = uuid.uuid4(), uuid.uuid4()
    token, other_token = mint_token(SECRET, subject), mint_token(SECRET, other)
    manager = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write", "manage"))

    # Given a person with files (one attached), a draft and an avatar, and someone else with a file
    files = [upload(api_v1, token, f"{CANARY}-{n}.txt", worker=worker) for n in range(3)]
    avatar = upload(api_v1, token, f"{CANARY}.png", b"face", "image/png", purpose="avatar", worker=worker)
    assert call("PUT", f"{api_v1}/principals/{subject}/avatar", token, {"file_id": avatar})[0] == 200
    assert call("PUT", f"{api_v1}/messages/m-1", token, {"file_ids": [files[0]]})[0] == 200
    assert call("PUT", f"{api_v1}/drafts/d-1", token, {"text": CANARY, "file_ids": [files[1]]})[0] == 200
    kept = upload(api_v1, other_token, "someone-else.txt")

    # When a manager erases the person
    status, erasure = call("POST", f"{api_v1}/erasures", manager, {"subject_id": str(subject)})
    assert status == 202, erasure
    deadline = time.monotonic() + 30
    while erasure["state"] == "running":
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.2)
        erasure = call("GET", f"{api_v1}/erasures/{erasure['id']}", manager)[1]

    # Then it is complete, with receipts, and nothing of the person is left anywhere
    assert erasure["state"] == "complete" and "subject_id" not in erasure, erasure
    assert len(erasure["receipts"]) == 4 and erasure["keys_confirmed_absent"] >= 4 * 6
    for file_id in [*files, avatar]:
        assert not objects_of(driver, store, env["LETHE_FILE_FS_ROOT"], file_id)
    tables = (
        "files",
        "messages",
        "attachments",
        "drafts",
        "events",
        "slots",
        "upload_sessions",
        "erasures",
        "receipts",
        "outbox",
    )
    for table in tables:
        dump = json.dumps(
            [r._asdict() for r in db.read(lambda conn: conn.execute(f"SELECT * FROM {table}").fetchall())], default=str
        )
        assert CANARY not in dump and str(subject) not in dump, table
    assert call("GET", f"{api_v1}/files/{kept}", other_token)[0] == 200
    for role in (api, worker, scheduler):
        assert role.stop(signal.SIGTERM) == 0
    for role in (api, worker, scheduler):
        assert CANARY not in role.output() and str(subject) not in role.output()
