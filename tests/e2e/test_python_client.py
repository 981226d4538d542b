"""The Python client (clients/python) against a running `lethe dev`, on fs and on SeaweedFS: every operation of
/openapi.json has a method and each model its schema's properties; native uploads (one cut off and resumed from
what the server has), tus and a 5 MiB range; links, attachments, drafts, events, deletion one and many; for a
`manage` token holds, erasures, receipts, quotas and the explainer; a problem raised with its code and reason;
and every webhook type Lethe sends verified by the client's `verify_webhook`. Then the client alone: installed
with pip into a fresh venv, it imports without anything else of Lethe."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domain.webhooks import EVENTS
from app.entry.token import mint_token
from tests.e2e.conftest import CLIENT_HOOK_KEY as HOOK_KEY
from tests.e2e.conftest import CLIENT_SECRET as SECRET
from tests.support import images
from tests.support.clamd import EICAR
from tests.support.roles import Role
from tests.support.webhook_receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "clients" / "python"))  # as `pip install ./clients/python` would place it

from lethe_client import (  # noqa: E402 (the path above first)
    MODELS,
    OPERATIONS,
    WEBHOOK_TYPES,
    Client,
    LetheError,
    UploadInterrupted,
    verify_webhook,
)

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024
CANARY = "Canary-client-tax-return"


class CutPart(httpx.HTTPTransport):
    """The network as a client meets it: the first time part `number` is sent, the connection drops."""

    def __init__(self, number: int):
        super().__init__()
        self.number, self.cut = number, False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT" and request.url.path.endswith(f"/parts/{self.number}") and not self.cut:
            self.cut = True
            raise httpx.ConnectError("connection reset by peer", request=request)
        return super().handle_request(request)


def client_of(base: str, scopes=("files:read", "files:write"), person: uuid.UUID | None = None, **kwargs) -> Client:
    return Client(base, mint_token(SECRET, person or uuid.uuid4(), scopes), backoff_s=0.05, **kwargs)


def wait_for_messages(hooks: Receiver, role: Role, wanted: set[tuple[str, str]], timeout: float = 60) -> list[Any]:
    """Every message received, verified by the client, once (type, file or hold id) of each wanted is among them."""
    deadline = time.monotonic() + timeout
    while True:
        verified = [verify_webhook(got.body, got.headers, HOOK_KEY) for got in list(hooks.received)]
        seen = {(m.type, str(m.data.get("hold_id") or m.data.get("erasure_id") or m.file_id)) for m in verified}
        if wanted <= seen:
            return verified
        assert time.monotonic() < deadline, (sorted(wanted - seen), role.tail())
        time.sleep(0.2)


def test_every_operation_upload_and_webhook_through_the_python_client(client_dev, tmp_path):
    base, hooks, role = client_dev.base, client_dev.hooks, client_dev.role
    spec = httpx.get(base + "/openapi.json").json()

    # The client cannot lag the server: every operation has its method, every model its schema's properties.
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values() if "operationId" in op}
    assert operations == set(OPERATIONS)
    assert all(callable(getattr(Client, method, None)) for method in OPERATIONS.values())
    assert set(WEBHOOK_TYPES) == set(EVENTS)  # and every type the server may send, it reads
    for name, model in MODELS.items():
        assert {f.name for f in dataclasses.fields(model)} == set(spec["components"]["schemas"][name]["properties"])

    person = uuid.uuid4()
    alex = client_of(base, person=person)
    manager = client_of(base, ("files:read", "files:write", "manage"))

    # Native parts: 12 MiB in three parts, the second cut off once; the upload is resumed from what the server has.
    data = os.urandom(12 * MIB + 321)
    cut = client_of(base, person=person, transport=CutPart(2), retries=0)
    with pytest.raises(UploadInterrupted) as interrupted:
        cut.upload(data, name=f"{CANARY}.bin")
    file_id = interrupted.value.file_id
    assert alex.get_upload(file_id).upload.parts_received == [1]
    done = alex.resume_upload(file_id, data)
    assert done.id == file_id and done.size_bytes == len(data) and done.sha256 == hashlib.sha256(data).hexdigest()
    assert alex.wait_ready(file_id).ready

    # A 5 MiB range, streamed, and the ETag it was read with holds the next range to that version.
    first = 3 * MIB + 17
    with alex.download(file_id, (first, first + 5 * MIB - 1)) as part:
        assert part.read() == data[first : first + 5 * MIB]
        etag = part.etag  # Lethe's validator; a redirect to the store (seaweed here) carries none
    assert (etag is None) == (client_dev.store == "seaweed")
    with alex.download(file_id, (0, 9), etag=etag) as again:
        assert again.read() == data[:10]
    if client_dev.store == "seaweed":  # unsealed S3: a direct upload, its parts straight to the store
        direct = alex.upload(data[: 6 * MIB], name="direct.bin", transfer="direct")
        assert alex.wait_ready(direct.id).ready
        with alex.download(direct.id) as whole:
            assert whole.read() == data[: 6 * MIB]
    assert alex.download_to(file_id, tmp_path / "copy.bin").read_bytes() == data

    # tus through tusclient; a link read without a token; a listing, page by page.
    small = alex.upload(b"over tus", name="tus.txt", mime_type="text/plain", transfer="tus")
    assert alex.wait_ready(small.id).ready
    link = alex.link(small.id, ttl="10m")
    assert alex.download_link(link.url) == b"over tus"
    listed = [f.id for f in alex.files(page_size=1)]
    assert {file_id, small.id} <= set(listed) and len(listed) == len(set(listed))

    # attachments, drafts, events
    message_id = str(uuid.uuid4())
    assert alex.attach(message_id, [small.id]).file_ids == [small.id]
    assert alex.put_draft("reply", "see attached", [file_id]).file_ids == [file_id]
    assert [d.key for d in alex.drafts()] == ["reply"]
    alex.delete_draft("reply")
    alex.delete_message(message_id)
    with pytest.raises(LetheError) as gone:  # its only message went, and with it the file
        alex.file(small.id)
    assert gone.value.status in (404, 410)
    assert any(event.resource_id in (file_id, small.id) for event in alex.events())

    # the other ends: blocked by the real clamd, failed by an abort, variants for a photo
    infected = alex.upload(EICAR, name="eicar.com")
    assert alex.wait_ready(infected.id).scan_status == "infected"
    aborted = alex.begin_upload({"name": "later.bin", "size_bytes": 10, "mime_type": "application/octet-stream"})
    alex.abort_upload(aborted.file.id)
    photo = alex.upload(images.photo(), name="photo.jpg", mime_type="image/jpeg")
    assert alex.wait_ready(photo.id).ready

    # The rest of the operations: a photo's variant, the avatar and logo slots, a restore, a tus termination,
    # a direct part URL (refused: this installation seals its files), each through its method.
    deadline = time.monotonic() + 60
    while not alex.file(photo.id).thumbnails:
        assert time.monotonic() < deadline, role.tail()
        time.sleep(0.2)
    with alex.download_variant(photo.id, "thumb-small") as thumb:
        assert thumb.read()[:3] in (b"RIF", b"\xff\xd8\xff", b"\x89PN")
    face = alex.upload(images.photo(), name="face.jpg", mime_type="image/jpeg", purpose="avatar")
    alex.wait_ready(face.id)
    assert alex.set_avatar(str(person), face.id) == face.id == alex.avatar(str(person))
    alex.remove_avatar(str(person))
    logo = manager.upload(images.photo(), name="logo.jpg", mime_type="image/jpeg", purpose="branding")
    manager.wait_ready(logo.id)
    assert manager.set_logo(logo.id) == logo.id == manager.logo()
    manager.remove_logo()
    restorable = alex.upload(b"restore me", name="r.txt", mime_type="text/plain")
    alex.delete(restorable.id)
    try:
        assert manager.restore(restorable.id).id == restorable.id
    except LetheError as refused_restore:  # its purge may have run already (lethe dev purges at once)
        assert refused_restore.status in (404, 409, 410), refused_restore
    with pytest.raises(LetheError) as no_url:
        alex.part_url(aborted.file.id, 1)
    assert no_url.value.status in (404, 409, 410, 422) and no_url.value.code
    from tusclient import client as tus_client

    tus = tus_client.TusClient(base + "/api/v1/tus", headers={"Authorization": f"Bearer {alex.token}"})
    pending = tus.uploader(file_stream=io.BytesIO(b"t" * 100), chunk_size=10, metadata={"filename": "t.bin"})
    pending.upload_chunk()
    tus_id = str(pending.url).rstrip("/").rsplit("/", 1)[-1]
    alex.terminate_tus_upload(tus_id)
    assert alex.file(tus_id).upload_state == "failed"

    # A problem raised with its code and reason.
    with pytest.raises(LetheError) as refused:
        alex.file(str(uuid.uuid4()))
    assert refused.value.status == 404 and refused.value.code == "not_found"
    with pytest.raises(LetheError) as too_big:
        alex.begin_upload({"name": "huge.bin", "size_bytes": 1 << 50, "mime_type": "application/octet-stream"})
    assert too_big.value.status == 413 and too_big.value.detail

    # manage: a hold, an erasure, a receipt, quotas, the explainer
    hold = manager.place_hold("CASE-1", file_id=file_id)
    assert manager.hold(hold.id).files_deferred >= 0 and any(h.id == hold.id for h in manager.holds())
    assert manager.explain(file_id).state
    manager.release_hold(hold.id)
    assert manager.set_quota(str(person), max_files=50).principal_id == str(person)
    assert manager.usage(str(person)).files["used"] >= 1
    results = alex.delete_many([photo.id, str(uuid.uuid4())])
    assert [r.status for r in results] == [204, 404]
    alex.delete(file_id)
    subject = uuid.uuid4()
    theirs = client_of(base, person=subject).upload(b"theirs", name="theirs.txt", mime_type="text/plain")
    erasure = manager.erase(str(subject))

    received = wait_for_messages(
        hooks,
        role,
        {
            ("file.ready", file_id),
            ("file.blocked", infected.id),
            ("file.failed", aborted.file.id),
            ("file.variants_ready", photo.id),
            ("file.purged", file_id),
            ("erasure.completed", erasure.id),
            ("hold.placed", hold.id),
            ("hold.released", hold.id),
        },
    )
    assert {m.type for m in received} == set(WEBHOOK_TYPES)
    assert manager.receipt(file_id).file_id == file_id
    assert manager.erasure(erasure.id).state == "complete" and theirs.id in str(received)
    assert all(CANARY not in got.body.decode() for got in hooks.received)


def test_the_client_installs_alone_into_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    # A venv without a pip of its own (its bootstrap took a third of the test), filled by this pip (`--python`).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--quiet",
            str(ROOT / "clients" / "python"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    probe = (
        "import importlib.util, lethe_client; "
        "assert importlib.util.find_spec('app') is None; "
        "print(len(lethe_client.OPERATIONS), lethe_client.Client.__name__)"
    )
    found = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert found.returncode == 0 and found.stdout.split() == [str(len(OPERATIONS)), "Client"], found.stderr
