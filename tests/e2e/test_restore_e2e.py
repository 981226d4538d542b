"""A restore drill through the roles as real processes (api under gunicorn, worker, scheduler): files uploaded, a
pg_dump, three of them deleted and purged (the scheduler writes the journal), the roles stopped, the dump
restored over the database, the roles started again. From the first request on, each deleted file answers 503
(restore pending) or 404, never its bytes; the scheduler applies the journal by itself (journal.auto_reconcile),
then the deleted files are 404 for good, the live ones 200, and /readyz is ready again."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests

from app.entry.token import mint_token
from tests.integration.test_journal import dump, restore_dump
from tests.support.ports import free_port
from tests.support.roles import stop_roles, wait_for_http, wait_for_output

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Restore-e2e-4Rz"


def start_roles(start_role, env: dict[str, Any], tmp_path: Path, round_: int, scheduler: bool = True):
    worker = start_role(["worker"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / f"w-metrics-{round_}")))
    api = start_role(["api"], dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / f"a-metrics-{round_}")))
    wait_for_output(worker, '"event": "worker.started"')
    wait_for_http(f"http://127.0.0.1:{env['LETHE_API_PORT']}/healthz", api)
    return [api, worker] + ([start_scheduler(start_role, env, tmp_path, round_)] if scheduler else [])


def start_scheduler(start_role, env: dict[str, Any], tmp_path: Path, round_: int):
    scheduler = start_role(
        ["scheduler"],
        dict(env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / f"s-metrics-{round_}")),
    )
    wait_for_output(scheduler, '"event": "scheduler.started"')
    return scheduler


def test_restored_database_serves_no_deleted_file_and_the_scheduler_reconciles(
    role_env, start_role, tmp_path, database_url
):
    for path in (
        tmp_path / "s-metrics-1",
        tmp_path / "w-metrics-1",
        tmp_path / "a-metrics-1",
        tmp_path / "s-metrics-2",
        tmp_path / "w-metrics-2",
        tmp_path / "a-metrics-2",
    ):
        path.mkdir()
    env = dict(
        role_env, LETHE_AUTH_JWT_SECRET=SECRET, LETHE_PRIVACY_OBJECT_DELETE_DELAY="10s", LETHE_FILE_GC_INTERVAL="5s"
    )
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}/api/v1"
    auth = {"Authorization": "Bearer " + mint_token(SECRET, uuid.uuid4())}
    roles = start_roles(start_role, env, tmp_path, 1)
    wait_for_http(f"http://127.0.0.1:{env['LETHE_API_PORT']}/readyz", roles[0])

    def upload(n: int) -> str:
        data = f"{CANARY} {n} ".encode() * 50
        created = requests.post(
            f"{base}/uploads",
            headers=auth,
            timeout=10,
            json={"name": f"{CANARY}-{n}.txt", "size_bytes": len(data), "mime_type": "text/plain"},
        ).json()
        file_id = created["file"]["id"]
        assert requests.put(f"{base}/uploads/{file_id}/parts/1", headers=auth, data=data, timeout=10).ok
        assert requests.post(f"{base}/uploads/{file_id}/complete", headers=auth, timeout=10).ok
        return file_id

    ids = [upload(n) for n in range(6)]
    deadline = time.monotonic() + 30
    while any(
        requests.get(f"{base}/files/{i}", headers=auth, timeout=10).json()["scan_status"] == "pending" for i in ids
    ):
        assert time.monotonic() < deadline, roles[1].tail()
        time.sleep(0.2)
    backup = tmp_path / "before.dump"
    dump(database_url, backup)
    deleted, live = ids[:3], ids[3:]
    for file_id in deleted:
        assert requests.delete(f"{base}/files/{file_id}", headers=auth, timeout=10).status_code == 204
    journal_dir = Path(env["LETHE_FILE_FS_ROOT"]) / "journal"

    def journaled_rows_removed() -> int:
        return sum(path.read_text().count('"file.row_removed"') for path in journal_dir.rglob("*.jsonl"))

    deadline = time.monotonic() + 60
    while journaled_rows_removed() < 1 or any(
        file_id in str(p) for p in (Path(env["LETHE_FILE_FS_ROOT"]) / "f").rglob("*") for file_id in deleted
    ):
        assert time.monotonic() < deadline, roles[2].tail()
        time.sleep(0.2)
    stop_roles(roles)

    # The backup is restored over the database; the roles start again
    restore_dump(database_url, backup)
    roles = start_roles(start_role, env, tmp_path, 2, scheduler=False)
    # Without a scheduler nobody reconciles: from the first request on, the restored rows are not served
    for _ in range(3):
        for file_id in deleted:
            answer = requests.get(f"{base}/files/{file_id}/content", headers=auth, timeout=10)
            assert answer.status_code == 503 and answer.json()["reason"] == "restore_pending", answer.text
    ready = requests.get(f"http://127.0.0.1:{env['LETHE_API_PORT']}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["reason"] == "restore_pending"
    roles.append(start_scheduler(start_role, env, tmp_path, 2))
    answers: list[int] = []
    deadline = time.monotonic() + 90
    while True:
        statuses = [
            requests.get(f"{base}/files/{file_id}/content", headers=auth, timeout=10).status_code for file_id in deleted
        ]
        answers += statuses
        assert 200 not in statuses, f"a deleted file was served after the restore: {statuses}"
        if all(status == 404 for status in statuses):
            break
        assert time.monotonic() < deadline, roles[2].tail() + roles[0].tail()
        time.sleep(0.1)
    for file_id in live:
        got = requests.get(f"{base}/files/{file_id}/content", headers=auth, timeout=10)
        assert got.status_code == 200 and CANARY.encode() in got.content
    wait_for_http(f"http://127.0.0.1:{env['LETHE_API_PORT']}/readyz", roles[0])
    assert '"event": "journal.reconciled"' in roles[2].output()
    stop_roles(roles)
    for role in roles:
        assert CANARY not in role.output(), "a file name reached a log"
