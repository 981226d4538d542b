"""Direct uploads end to end (issue 26): the api and worker roles on RabbitMQ with the S3 driver (moto's
server); a client with a token for the API and nothing else creates a direct upload, PUTs each part to its
presigned URL with plain HTTP (no credentials), completes, and downloads the same bytes once the worker
scanned it; an abandoned direct upload leaves no multipart upload once the worker ran its purge."""

from __future__ import annotations

import hashlib
import os
import time
import uuid

import pytest
import requests

from app.entry.token import mint_token
from tests.support.roles import start_api_and_worker, stop_roles, with_driver

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
MIB = 1024 * 1024


def test_a_direct_upload_through_the_roles_with_plain_http_puts(role_env, start_role, tmp_path, request):
    # a direct upload's bytes reach the store as the client sent them: files stored as they are
    env, store = with_driver(
        dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET, LETHE_FILE_PART_SIZE="5MiB", LETHE_FILE_ENCRYPTION="off"),
        "s3",
        request,
    )
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    headers = {"Authorization": f"Bearer {mint_token(SECRET, uuid.uuid4())}"}
    data = os.urandom(10 * MIB + 77)

    created = requests.post(
        f"{base}/api/v1/uploads",
        headers=headers,
        timeout=10,
        json={
            "name": "direct.bin",
            "size_bytes": len(data),
            "mime_type": "application/octet-stream",
            "sha256": hashlib.sha256(data).hexdigest(),
            "transfer": "direct",
        },
    )
    assert created.status_code == 201, created.text
    upload = created.json()["upload"]
    file_id = created.json()["file"]["id"]
    for part in upload["parts"]:
        n = part["number"]
        chunk = data[(n - 1) * upload["part_size"] : n * upload["part_size"]]
        assert requests.put(part["url"], data=chunk, timeout=30).status_code == 200  # no token, no credentials
    completed = requests.post(f"{base}/api/v1/uploads/{file_id}/complete", headers=headers, json={}, timeout=30)
    assert completed.status_code == 200 and completed.json()["upload_state"] == "complete", completed.text
    deadline = time.monotonic() + 20
    while (
        requests.get(f"{base}/api/v1/files/{file_id}", headers=headers, timeout=10).json()["scan_status"] == "pending"
    ):
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.1)
    content = requests.get(f"{base}/api/v1/files/{file_id}/content", headers=headers, timeout=30)
    assert content.status_code == 200 and content.content == data

    # An abandoned one: a part sent, then the client gives up; the abort goes through the worker's purge.
    doomed = requests.post(
        f"{base}/api/v1/uploads",
        headers=headers,
        timeout=10,
        json={
            "name": "doomed.bin",
            "size_bytes": len(data),
            "mime_type": "application/octet-stream",
            "transfer": "direct",
        },
    ).json()
    first = doomed["upload"]["parts"][0]
    assert requests.put(first["url"], data=data[: doomed["upload"]["part_size"]], timeout=30).status_code == 200
    assert (
        requests.delete(f"{base}/api/v1/uploads/{doomed['file']['id']}", headers=headers, timeout=10).status_code == 204
    )
    deadline = time.monotonic() + 20
    while any(
        doomed["file"]["id"] in u.object_name for u in store.client._list_multipart_uploads(store.bucket).uploads
    ):
        assert time.monotonic() < deadline, worker.tail()
        time.sleep(0.1)
    assert requests.put(first["url"], data=b"late", timeout=30).status_code >= 400  # the store refuses the URL now
    stop_roles([api, worker])
    for role in (api, worker):
        assert "X-Amz-Signature" not in role.output()  # no presigned URL reaches a log
