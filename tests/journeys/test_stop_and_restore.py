"""A backup, deletions, a graceful stop right after them, and a restore, as people meet it, on fs and on SeaweedFS
with a versioned bucket. The journal writer is made to wait a whole second before it writes (journal.write_linger),
so that only the last flush a stopping process makes can put the last deletions in the journal: `lethe dev`
stopped with Ctrl-C, the api stopped by SIGTERM (Kubernetes' way), no scheduler anywhere. Then the backup is
restored and Lethe started again: not one request serves a deleted file, and the journal is applied by itself."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.domain.journal import JOURNAL_PREFIX, parse_segment, read_segment
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call, upload
from tests.integration.test_journal import dump, restore_dump
from tests.support.keyring import SEALED_ENV
from tests.support.ports import free_port
from tests.support.roles import Role, start_api, wait_for_http, wait_for_output

pytestmark = [pytest.mark.e2e, pytest.mark.journey]
ROOT = Path(__file__).resolve().parents[2]
CANARY = "Stop-Canary-3Vw"
SECRET = "stop-secret-of-sufficient-length-0123456789"


def store_env(driver: str, request, tmp_path: Path) -> tuple[dict[str, Any], object]:
    """The store's settings, and a store to read the journal through."""
    if driver == "fs":
        from app.storage.fs import FsStore

        root = tmp_path / "objects"
        return {"LETHE_FILE_FS_ROOT": str(root)}, FsStore(str(root))
    from tests.support.stores import make_s3_store

    endpoint = request.getfixturevalue("seaweed_server")
    store = make_s3_store(endpoint, versioned=True, server="seaweed")
    return {
        "LETHE_FILE_STORAGE_DRIVER": "s3",
        "LETHE_FILE_S3_ENDPOINT": endpoint,
        "LETHE_FILE_S3_BUCKET": store.bucket,
        "LETHE_FILE_S3_ACCESS_KEY": "testing",
        "LETHE_FILE_S3_SECRET_KEY": "testing",
        "LETHE_FILE_S3_REGION": "us-east-1",
        "LETHE_FILE_S3_SECURE": "false",
    }, store


def journaled(store) -> dict[str, set[str]]:
    """Every file id the journal names, by entry kind (every segment verified)."""
    found: dict[str, set[str]] = {}
    for listed in store.list_prefix(JOURNAL_PREFIX):
        installation = listed.key[len(JOURNAL_PREFIX) :].split("/", 1)[0]
        segment = parse_segment(listed.key, uuid.UUID(installation))
        if segment is None:
            continue
        for entry in read_segment(segment, store.get(listed.key).decode()).entries:
            found.setdefault(entry.kind, set()).update(str(file_id) for file_id in entry.files)
    return found


def never_served_until_gone(api_v1: str, token: str, deleted: list[str], role: Role, timeout: float = 90) -> None:
    """From the first request after the restore: each deleted file answers 503 (waiting for the journal) or 404,
    never its bytes, until all are 404."""
    deadline = time.monotonic() + timeout
    while True:
        statuses = [call("GET", f"{api_v1}/files/{file_id}/content", token)[0] for file_id in deleted]
        assert 200 not in statuses, f"a deleted file was served after the restore: {statuses}"
        assert set(statuses) <= {503, 404}, statuses
        if set(statuses) == {404}:
            return
        assert time.monotonic() < deadline, role.tail()
        time.sleep(0.1)


@pytest.mark.parametrize("driver", ["fs", "seaweed"])
def test_ctrl_c_right_after_deletions_then_a_restore_serves_no_deleted_file(driver, database_url, tmp_path, request):
    settings, store = store_env(driver, request, tmp_path)
    port = free_port()
    here = tmp_path / "project"
    here.mkdir()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_JOURNAL_WRITE_LINGER": "1s",
        **SEALED_ENV,
        **settings,
    }
    api_v1 = f"http://127.0.0.1:{port}/api/v1"
    token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
    dev = Role(["dev", "--port", str(port)], env, tmp_path / "dev-1.log", cwd=here)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", dev)
        ids = [upload(api_v1, token, f"{CANARY}-{n}.txt", f"{CANARY} {n} ".encode() * 30) for n in range(6)]
        deadline = time.monotonic() + 30
        while any(call("GET", f"{api_v1}/files/{i}", token)[1]["scan_status"] == "pending" for i in ids):
            assert time.monotonic() < deadline, dev.tail()
            time.sleep(0.1)
        dump(database_url, tmp_path / "before.dump")
        deleted, live = ids[:3], ids[3:]
        # Given one deletion purged (its row gone), then two more, and Ctrl-C right after their 204s
        assert call("DELETE", f"{api_v1}/files/{deleted[0]}", token)[0] == 204
        deadline = time.monotonic() + 30
        while call("GET", f"{api_v1}/files/{deleted[0]}", token)[0] != 404 or deleted[0] not in journaled(store).get(
            "file.row_removed", set()
        ):
            assert time.monotonic() < deadline, dev.tail()
            time.sleep(0.1)
        for file_id in deleted[1:]:
            assert call("DELETE", f"{api_v1}/files/{file_id}", token)[0] == 204
        assert dev.stop(signal.SIGINT) == 0
        # Then the journal holds every deletion the stopped process committed (its last flush wrote them)
        assert set(deleted) <= journaled(store).get("file.marked", set()), dev.tail()

        # When last night's backup is restored and lethe dev started again
        restore_dump(database_url, tmp_path / "before.dump")
        dev = Role(["dev", "--port", str(port)], env, tmp_path / "dev-2.log", cwd=here)
        wait_for_http(f"http://127.0.0.1:{port}/healthz", dev)
        never_served_until_gone(api_v1, token, deleted, dev)
        for file_id in live:
            status, _ = call("GET", f"{api_v1}/files/{file_id}", token)
            assert status == 200
        assert '"journal.reconciled"' in dev.output() or "journal.reconciled" in dev.output()
    finally:
        dev.stop(signal.SIGINT)
    assert CANARY not in open(tmp_path / "dev-1.log").read() + open(tmp_path / "dev-2.log").read()


def test_sigterm_to_the_api_right_after_deletions_writes_them_before_it_exits(role_env, start_role, tmp_path):
    from app.storage.fs import FsStore

    env = dict(role_env, LETHE_JOURNAL_WRITE_LINGER="1s", LETHE_AUTH_JWT_SECRET=SECRET)
    token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
    api = start_api(start_role, env)
    worker = start_role(["worker"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "worker-metrics")))
    (tmp_path / "worker-metrics").mkdir(exist_ok=True)
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    wait_for_http(base + "/readyz", api)
    wait_for_output(worker, '"event": "worker.started"')
    ids = [upload(base + "/api/v1", token, f"{CANARY}-{n}.txt", worker=worker) for n in range(3)]
    # Given deletions answered, and the api stopped as Kubernetes stops a pod, no scheduler running
    for file_id in ids:
        assert call("DELETE", f"{base}/api/v1/files/{file_id}", token)[0] == 204
    assert api.stop(signal.SIGTERM) == 0
    # Then its worker process wrote them to the journal before it exited
    store = FsStore(env["LETHE_FILE_FS_ROOT"])
    assert set(ids) <= journaled(store).get("file.marked", set()), api.tail()
    assert '"journal.closed"' in api.output()
    worker.stop(signal.SIGTERM)
    assert CANARY not in api.output() + worker.output()
