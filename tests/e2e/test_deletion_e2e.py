"""End to end (D1, D7, D15): api, worker and scheduler as real processes on PostgreSQL and RabbitMQ, with
each driver. A file whose name carries a canary is uploaded over HTTP, attached, and its message deleted;
within seconds no key of the file is in the store, no row of it in the database, and the canary is in none
of the three processes' logs."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid

import pytest

from app.domain.keys import original_key
from app.entry.token import mint_token
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker, wait_for_http, wait_for_output, with_driver

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Zq81-medical-record"


def call(method, url, token, body=None, raw=None):
    data = json.dumps(body).encode() if body is not None else raw
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    elif raw is not None:
        request.add_header("Content-Type", "application/octet-stream")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, _body(response.read(), response.headers.get_content_type())
    except urllib.error.HTTPError as exc:
        return exc.code, _body(exc.read(), exc.headers.get_content_type())


def _body(data: bytes, content_type: str):
    """A JSON answer parsed; anything else (a file's bytes) as it came."""
    if not data:
        return None
    return json.loads(data) if content_type.endswith("json") else data


def upload(api_v1, token, name, data=b"private words", mime_type="text/plain", purpose="attachment", worker=None):
    """Create, send one part, complete; with the worker, wait until its scan settled. Returns the file id."""
    status, created = call(
        "POST",
        f"{api_v1}/uploads",
        token,
        {"name": name, "size_bytes": len(data), "mime_type": mime_type, "purpose": purpose},
    )
    assert status == 201, created
    file_id = created["file"]["id"]
    assert call("PUT", f"{api_v1}/uploads/{file_id}/parts/1", token, raw=data)[0] == 200
    assert call("POST", f"{api_v1}/uploads/{file_id}/complete", token)[0] == 200
    if worker is not None:
        deadline = time.monotonic() + 20
        while call("GET", f"{api_v1}/files/{file_id}", token)[1]["scan_status"] == "pending":
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.1)
    return file_id


def objects_of(driver, store, root, file_id) -> list[str]:
    """Every object of the file (a test may list; the service never does)."""
    if driver == "fs":
        found = []
        for directory, _, names in os.walk(root):
            found += [os.path.join(directory, n) for n in names if file_id in os.path.join(directory, n)]
        return found
    keys = [obj.object_name for obj in store.client.list_objects(store.bucket, prefix="f/", recursive=True)]
    keys += [obj.object_name for obj in store.client.list_objects(store.bucket, prefix="uploads/", recursive=True)]
    uploads = store.client._list_multipart_uploads(store.bucket).uploads
    return [k for k in keys if file_id in k] + [u.object_name for u in uploads if file_id in u.object_name]


@pytest.mark.parametrize("driver", ["fs", "s3"])
def test_delete_a_message_end_to_end(driver, role_env, start_role, db, tmp_path, request):
    env, store = with_driver(dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET), driver, request)
    metrics_ports = {"worker": env["LETHE_METRICS_PORT"], "scheduler": str(free_port())}  # from the OS, never +1
    api = start_role(["api"], env)
    worker = start_role(
        ["worker"],
        dict(
            env, LETHE_METRICS_PORT=metrics_ports["worker"], PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")
        ),
    )
    scheduler = start_role(
        ["scheduler"],
        dict(
            env,
            LETHE_METRICS_PORT=metrics_ports["scheduler"],
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "scheduler-metrics"),
        ),
    )
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    wait_for_http(base + "/readyz", api)
    wait_for_output(worker, '"event": "worker.started"')
    token = mint_token(SECRET, uuid.uuid4())
    api_v1 = base + "/api/v1"

    # Given an uploaded, scanned and attached file whose name carries the canary
    file_id = upload(api_v1, token, f"{CANARY}.pdf", b"blood type: canary", "application/pdf", worker=worker)
    assert call("PUT", f"{api_v1}/messages/e2e-1", token, {"file_ids": [file_id]})[0] == 200
    assert objects_of(driver, store, env["LETHE_FILE_FS_ROOT"], file_id)

    # When the message is deleted
    assert call("DELETE", f"{api_v1}/messages/e2e-1", token)[0] == 204

    # Then within seconds nothing of the file is left in the store or the database
    deadline = time.monotonic() + 15
    while True:
        row = db.read(lambda conn: conn.execute("SELECT id FROM files WHERE id = %s", (file_id,)).fetchone())
        left = objects_of(driver, store, env["LETHE_FILE_FS_ROOT"], file_id)
        if row is None and not left:
            break
        assert time.monotonic() < deadline, f"left: row={row} objects={left}\n{worker.output()}"
        time.sleep(0.1)
    events = call("GET", f"{api_v1}/events", token)[1]["events"]
    assert events and all(e["redacted"] for e in events)
    assert CANARY not in json.dumps(events)
    stored = db.read(lambda conn: conn.execute("SELECT payload::text AS p FROM events").fetchall())
    assert all(CANARY not in e.p for e in stored)

    # And the canary is in none of the three processes' logs
    for role in (api, worker, scheduler):
        assert role.stop(signal.SIGTERM) == 0
    outputs = {name: role.output() for name, role in (("api", api), ("worker", worker), ("scheduler", scheduler))}
    assert '"event": "purge.done"' in outputs["worker"]
    for name, text in outputs.items():
        assert CANARY not in text, name
        assert original_key(file_id) not in text, name


@pytest.mark.parametrize("driver", ["fs", "s3"])
def test_batch_delete_end_to_end(driver, role_env, start_role, db, tmp_path, request):
    """batchDeleteFiles (issue 24) through the api and worker roles on RabbitMQ: each id answered as
    deleteFile would, and within seconds every deleted file's objects and row are gone, the attached one
    stays, and no canary reaches a log."""
    env, store = with_driver(dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET), driver, request)
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    token = mint_token(SECRET, uuid.uuid4())
    api_v1 = base + "/api/v1"

    # Given three files of one person, one of them attached, and an id nobody has
    doomed = [upload(api_v1, token, f"{CANARY}-{n}.txt", worker=worker) for n in range(2)]
    kept = upload(api_v1, token, f"{CANARY}-kept.txt", worker=worker)
    assert call("PUT", f"{api_v1}/messages/e2e-batch", token, {"file_ids": [kept]})[0] == 200
    unknown = str(uuid.uuid4())

    # When they are deleted in one request
    status, body = call("POST", f"{api_v1}/files/batch-delete", token, {"ids": [*doomed, kept, unknown]})

    # Then each id gets deleteFile's answer, and the deleted files are purged within seconds
    assert status == 200
    assert body["results"] == [
        {"id": doomed[0], "status": 204},
        {"id": doomed[1], "status": 204},
        {"id": kept, "status": 409, "reason": "file_attached"},
        {"id": unknown, "status": 404, "reason": "not_found"},
    ]
    deadline = time.monotonic() + 15
    while True:
        rows = db.read(
            lambda conn: conn.execute("SELECT id FROM files WHERE id = ANY(%s::uuid[])", (doomed,)).fetchall()
        )
        left = [key for file_id in doomed for key in objects_of(driver, store, env["LETHE_FILE_FS_ROOT"], file_id)]
        if not rows and not left:
            break
        assert time.monotonic() < deadline, f"left: rows={rows} objects={left}\n{worker.output()}"
        time.sleep(0.1)
    assert objects_of(driver, store, env["LETHE_FILE_FS_ROOT"], kept)
    for role in (api, worker):
        assert role.stop(signal.SIGTERM) == 0
        assert CANARY not in role.output()
