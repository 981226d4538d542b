"""End to end: the api and a worker as real processes on PostgreSQL and RabbitMQ send `file.ready` when an upload's
scan made it deliverable, `file.purged` for a deleteFile and `erasure.completed` for an erasure to the receiver of docs/api.md, run as it is written there,
which verifies each message with the `standardwebhooks` library. Nothing in what it received names anyone."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call, upload
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Wx28-medical-bill"
DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def receiver_of_the_doc() -> str:
    section = DOC.read_text().split("## Webhooks (Standard Webhooks", 1)[1]
    found = re.search(r"^```python\n(.*?)^```", section, re.M | re.S)
    assert found is not None
    return found.group(1)


class DocReceiver:
    def __init__(self, tmp_path: Path, secret: str):
        script = tmp_path / "receiver.py"
        script.write_text(receiver_of_the_doc())
        self.port = free_port()
        self.log = open(tmp_path / "receiver.out", "w+")
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", ""), "WEBHOOK_SECRET": secret, "PORT": str(self.port)},
        )

    def messages(self) -> list[dict[str, Any]]:
        self.log.flush()
        lines = Path(self.log.name).read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def wait_for(self, predicate, worker, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [message for message in self.messages() if predicate(message)]
            if found:
                return found[0]
            assert self.proc.poll() is None, Path(self.log.name).read_text()
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.2)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


def test_file_purged_and_erasure_completed_reach_the_receiver_of_the_doc(role_env, start_role, tmp_path):
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    receiver = DocReceiver(tmp_path, secret)
    try:
        endpoints = [
            {
                "name": "app",
                "url": f"http://127.0.0.1:{receiver.port}/hooks",
                "secret": secret,
                "events": ["file.ready", "file.purged", "erasure.completed"],
            }
        ]
        env = dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET, LETHE_WEBHOOKS_ENDPOINTS=json.dumps(endpoints))
        api, worker, base = start_api_and_worker(start_role, env, tmp_path)
        api_v1 = base + "/api/v1"
        person, subject = uuid.uuid4(), uuid.uuid4()
        token = mint_token(SECRET, person)
        manager = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write", "manage"))

        file_id = upload(api_v1, token, f"{CANARY}.txt", worker=worker)
        ready = receiver.wait_for(lambda m: m["type"] == "file.ready" and m["data"]["file_id"] == file_id, worker)
        assert ready["data"] == {"file_id": file_id, "purpose": "attachment", "size_bytes": ready["data"]["size_bytes"]}
        assert call("DELETE", f"{api_v1}/files/{file_id}", token)[0] == 204
        purged = receiver.wait_for(lambda m: m["type"] == "file.purged" and m["data"]["file_id"] == file_id, worker)
        assert purged["data"]["deleted_via"] == "file" and purged["data"]["keys_deleted"] >= 1
        status, receipt = call("GET", f"{api_v1}/receipts/{file_id}", manager)
        assert status == 200 and receipt["purged_at"].startswith(purged["data"]["purged_at"][:19])

        theirs = upload(api_v1, mint_token(SECRET, subject), f"{CANARY}-2.txt", worker=worker)
        status, erasure = call("POST", f"{api_v1}/erasures", manager, {"subject_id": str(subject)})
        assert status == 202, erasure
        done = receiver.wait_for(
            lambda m: m["type"] == "erasure.completed" and m["data"]["erasure_id"] == erasure["id"], worker
        )
        assert done["data"]["file_ids"] == [theirs] and done["data"]["files_purged"] == 1

        received = Path(receiver.log.name).read_text()
        for value in (CANARY, str(person), str(subject)):
            assert value not in received
    finally:
        receiver.close()
