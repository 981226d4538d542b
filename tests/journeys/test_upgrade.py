"""The upgrade from every earlier release, as an operator lives it, on fs and on SeaweedFS with a versioned bucket.

The oldest release in RELEASES is checked out from the repository's history (a git worktree) and run as `lethe dev`
on a database and a store of the drill's own; it makes files of every kind and state: attached, drafted, an
avatar, a held file deleted, a file deleted inside its delay, a native and a tus upload sent half-way, an image,
an erased person. Then each later release in turn, and last this tree: `lethe migrate`, `lethe dev` on the same
database and store, every kind checked (the same bytes and ranges, the message, the draft, the avatar, the hold in
force, the deleted files 404, the half-sent uploads finished under the new release, the erased person gone), new
files made, and nothing in any log names a file. Each later release adds its entry to RELEASES.

The chart's upgrade: this chart renders as an upgrade from each release's documented values."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call
from tests.support import zygote
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = [pytest.mark.e2e, pytest.mark.journey]
ROOT = Path(__file__).resolve().parents[2]

# The releases an installation may be upgraded from, oldest first: a commit of this repository that landed, and
# what it brought that the drill must carry across. A release adds itself here.
RELEASES = [
    ("850c882", "2026-12-01: plaintext files, legal holds, erasures, tus, direct uploads; no journal, no keys"),
    ("6aa839f", "2026-12-04: per-file keys (lethe dev seals new files), variants, the journal the scheduler writes"),
]
CANARY = "Upgrade-Canary-8Jq"
SECRET = "upgrade-drill-secret-of-sufficient-length-01"
ALEX, SAM, OWNER = (uuid.UUID(f"00000000-0000-4000-8000-00000000{n:04d}") for n in (0xA1E, 0x5A3, 0x0E1))
PART = 5 * 1024 * 1024  # the S3 minimum part size; fs takes the same


def token(who: uuid.UUID, manage: bool = False) -> str:
    return mint_token(SECRET, who, ("files:read", "files:write", "manage") if manage else ("files:read", "files:write"))


def raw(method: str, url: str, bearer: str, data: bytes | None = None, headers: dict[str, Any] | None = None):
    """A request whose answer is read as bytes (a file's content, a tus answer)."""
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Authorization": f"Bearer {bearer}", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@contextlib.contextmanager
def release_tree(ref: str, workdir: Path):
    """The release's code, checked out from this repository's history."""
    tree = workdir / f"release-{ref}"
    made = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(tree), ref],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.fail(
            f"the release {ref} is not in this repository's history (a clone without it? `git fetch "
            f"--unshallow`): {made.stderr[-500:]}",
            pytrace=False,
        )
    try:
        yield tree
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


class Installation:
    """One installation's database, store and folder, run by one release after the other."""

    def __init__(self, url: str, store_env: dict[str, Any], project: Path, logs: Path):
        self.url, self.store_env, self.project, self.logs = url, store_env, project, logs
        self.port = free_port()
        self.api = f"http://127.0.0.1:{self.port}/api/v1"
        self.outputs: list[str] = []

    def env(self, tree: Path) -> dict[str, Any]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.project),
            "PYTHONPATH": str(tree),
            "LETHE_DATABASE_URL": self.url,
            "LETHE_AUTH_JWT_SECRET": SECRET,
            "LETHE_FILE_PART_SIZE": str(PART),
            **self.store_env,
        }

    def command(self, tree: Path, *args: str) -> subprocess.CompletedProcess[Any]:
        done = zygote.run(
            [sys.executable, "-m", "app.entry", *args],
            env=self.env(tree),
            cwd=self.project,
            capture_output=True,
            text=True,
            timeout=180,
        )
        self.outputs.append(done.stdout + done.stderr)
        return done

    @contextlib.contextmanager
    def running(self, tree: Path, label: str):
        migrated = self.command(tree, "migrate")
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        role = Role(["dev", "--port", str(self.port)], self.env(tree), self.logs / f"dev-{label}.log", cwd=self.project)
        try:
            wait_for_http(f"http://127.0.0.1:{self.port}/readyz", role, timeout=90)
            yield role
        finally:
            role.stop()
            self.outputs.append(role.output())

    def settled(self, file_id: str, who: uuid.UUID) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            status, row = call("GET", f"{self.api}/files/{file_id}", token(who))
            assert status == 200, row
            if row["scan_status"] != "pending":
                return row
            assert time.monotonic() < deadline, row
            time.sleep(0.1)


def upload(
    inst: Installation,
    who: uuid.UUID,
    name: str,
    data: bytes,
    purpose: str = "attachment",
    mime_type: str = "text/plain",
) -> str:
    status, created = call(
        "POST",
        f"{inst.api}/uploads",
        token(who),
        {"name": name, "size_bytes": len(data), "mime_type": mime_type, "purpose": purpose},
    )
    assert status == 201, created
    file_id = created["file"]["id"]
    for number, start in enumerate(range(0, len(data), PART), start=1):
        assert (
            call("PUT", f"{inst.api}/uploads/{file_id}/parts/{number}", token(who), raw=data[start : start + PART])[0]
            == 200
        )
    assert call("POST", f"{inst.api}/uploads/{file_id}/complete", token(who))[0] == 200
    inst.settled(file_id, who)
    return file_id


def png() -> bytes:
    from tests.support.images import png_with_alpha

    return png_with_alpha(64, 48)


def make_everything(inst: Installation) -> dict[str, Any]:
    """Files of every kind and state, made by the oldest release."""
    made: dict[str, Any] = {"bytes": {}}

    def keep(name: str, data: bytes, **kwargs) -> str:
        file_id = upload(inst, kwargs.pop("who", ALEX), f"{CANARY}-{name}", data, **kwargs)
        made[name], made["bytes"][name] = file_id, data
        return file_id

    attached = keep("attached.txt", f"{CANARY} attached ".encode() * 300)
    assert call("PUT", f"{inst.api}/messages/msg-upgrade-1", token(ALEX), {"file_ids": [attached]})[0] == 200
    drafted = keep("drafted.txt", f"{CANARY} drafted ".encode() * 50)
    assert call("PUT", f"{inst.api}/drafts/note", token(ALEX), {"text": f"{CANARY} draft text", "file_ids": [drafted]})[
        0
    ] in (200, 204)
    avatar = keep("avatar.png", png(), purpose="avatar", mime_type="image/png")
    assert call("PUT", f"{inst.api}/principals/{ALEX}/avatar", token(ALEX), {"file_id": avatar})[0] == 200
    keep("image.png", png(), mime_type="image/png")
    held = keep("held.txt", f"{CANARY} held ".encode() * 40)
    status, hold = call(
        "POST", f"{inst.api}/holds", token(OWNER, manage=True), {"file_id": held, "case_ref": "CASE-2026-0042"}
    )
    assert status == 201, hold
    made["hold"] = hold["id"]
    assert call("DELETE", f"{inst.api}/files/{held}", token(ALEX))[0] == 204
    deleted = keep("deleted.txt", f"{CANARY} deleted ".encode() * 40)
    assert call("DELETE", f"{inst.api}/files/{deleted}", token(ALEX))[0] == 204
    # a native upload with its first part sent
    half = (f"{CANARY} half native ".encode() * (PART // 20 + 10))[: PART + 4000]
    status, created = call(
        "POST",
        f"{inst.api}/uploads",
        token(ALEX),
        {"name": f"{CANARY}-half.bin", "size_bytes": len(half), "mime_type": "application/octet-stream"},
    )
    assert status == 201, created
    made["native"], made["bytes"]["native"] = created["file"]["id"], half
    assert call("PUT", f"{inst.api}/uploads/{made['native']}/parts/1", token(ALEX), raw=half[:PART])[0] == 200
    # a tus upload with its first part sent
    tus = (f"{CANARY} half tus ".encode() * (PART // 17 + 10))[: PART + 3000]
    name = base64.b64encode(f"{CANARY}-tus.bin".encode()).decode()
    status, headers, _ = raw(
        "POST",
        f"{inst.api}/tus",
        token(ALEX),
        headers={"Tus-Resumable": "1.0.0", "Upload-Length": str(len(tus)), "Upload-Metadata": f"filename {name}"},
    )
    assert status == 201, headers
    location = headers["Location"]
    made["tus"], made["bytes"]["tus"] = location.rstrip("/").rsplit("/", 1)[-1], tus
    made["tus_location"] = location if location.startswith("http") else f"http://127.0.0.1:{inst.port}{location}"
    status, _, body = raw(
        "PATCH",
        made["tus_location"],
        token(ALEX),
        data=tus[:PART],
        headers={"Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"},
    )
    assert status == 204, body
    # an erased person
    made["sam"] = [upload(inst, SAM, f"{CANARY}-sam-{n}.txt", f"{CANARY} sam {n} ".encode() * 30) for n in range(2)]
    assert call(
        "PUT", f"{inst.api}/drafts/sam-note", token(SAM), {"text": f"{CANARY} sam's draft", "file_ids": made["sam"]}
    )[0] in (200, 204)
    status, erasure = call("POST", f"{inst.api}/erasures", token(OWNER, manage=True), {"subject_id": str(SAM)})
    assert status in (201, 202), erasure
    deadline = time.monotonic() + 60
    while call("GET", f"{inst.api}/erasures/{erasure['id']}", token(OWNER, manage=True))[1]["state"] != "complete":
        assert time.monotonic() < deadline, "the erasure did not complete under the old release"
        time.sleep(0.2)
    return made


def check_everything(inst: Installation, made: dict[str, Any], last: bool) -> None:
    """What the oldest release made, read and used under a later one; the half-sent uploads wait across every
    release and are finished under the last."""
    alex = token(ALEX)
    for name in ("attached.txt", "drafted.txt", "avatar.png", "image.png"):
        data = made["bytes"][name]
        status, _, body = raw("GET", f"{inst.api}/files/{made[name]}/content", alex)
        assert status == 200 and hashlib.sha256(body).digest() == hashlib.sha256(data).digest(), (name, status)
        status, _, part = raw("GET", f"{inst.api}/files/{made[name]}/content", alex, headers={"Range": "bytes=10-99"})
        assert status == 206 and part == data[10:100], (name, status)
    status, refused = call("DELETE", f"{inst.api}/files/{made['attached.txt']}", alex)  # the attachment stands
    assert status == 409 and refused["reason"] == "file_attached", refused
    status, drafts = call("GET", f"{inst.api}/drafts", alex)
    assert status == 200 and any(made["drafted.txt"] in d["file_ids"] for d in drafts["drafts"]), drafts
    status, slot = call("GET", f"{inst.api}/principals/{ALEX}/avatar", alex)
    assert status == 200 and slot["file_id"] == made["avatar.png"], slot
    status, hold = call("GET", f"{inst.api}/holds/{made['hold']}", token(OWNER, manage=True))
    assert status == 200 and not hold.get("released_at"), hold
    for name in ("held.txt", "deleted.txt"):
        assert call("GET", f"{inst.api}/files/{made[name]}", alex)[0] == 404, name
    for file_id in made["sam"]:
        assert call("GET", f"{inst.api}/files/{file_id}", token(OWNER, manage=True))[0] == 404
    assert call("GET", f"{inst.api}/drafts", token(SAM))[1]["drafts"] == []
    if not last:
        status, session = call("GET", f"{inst.api}/uploads/{made['native']}", alex)
        assert status == 200 and session["upload"]["state"] == "open" and session["upload"]["parts_received"] == [1], (
            session
        )
        status, headers, _ = raw("HEAD", made["tus_location"], alex, headers={"Tus-Resumable": "1.0.0"})
        assert status == 200 and headers["Upload-Offset"] == str(PART), headers
        return
    finish_half_sent(inst, made)
    for name, key in (("native", "native"), ("tus", "tus")):
        status, _, body = raw("GET", f"{inst.api}/files/{made[key]}/content", alex)
        assert status == 200 and body == made["bytes"][key], (name, status)


def finish_half_sent(inst: Installation, made: dict[str, Any]) -> None:
    """The uploads the oldest release left half-way, finished under a later one."""
    alex = token(ALEX)
    data = made["bytes"]["native"]
    assert call("PUT", f"{inst.api}/uploads/{made['native']}/parts/2", alex, raw=data[PART:])[0] == 200
    status, answer = call("POST", f"{inst.api}/uploads/{made['native']}/complete", alex)
    assert status == 200, answer
    inst.settled(made["native"], ALEX)
    data = made["bytes"]["tus"]
    status, headers, _ = raw("HEAD", made["tus_location"], alex, headers={"Tus-Resumable": "1.0.0"})
    assert status == 200 and headers["Upload-Offset"] == str(PART), headers
    status, _, body = raw(
        "PATCH",
        made["tus_location"],
        alex,
        data=data[PART:],
        headers={
            "Tus-Resumable": "1.0.0",
            "Upload-Offset": str(PART),
            "Content-Type": "application/offset+octet-stream",
        },
    )
    assert status == 204, body
    inst.settled(made["tus"], ALEX)


def new_files(inst: Installation, label: str) -> dict[str, Any]:
    """What each release adds: a file kept, and one deleted (its end goes to that release's journal)."""
    kept = upload(inst, ALEX, f"{CANARY}-{label}-kept.txt", f"{CANARY} {label} kept ".encode() * 40)
    gone = upload(inst, ALEX, f"{CANARY}-{label}-gone.txt", f"{CANARY} {label} gone ".encode() * 40)
    assert call("DELETE", f"{inst.api}/files/{gone}", token(ALEX))[0] == 204
    return {"kept": kept, "gone": gone, "data": f"{CANARY} {label} kept ".encode() * 40}


@pytest.fixture
def own_database(postgres_server):
    name = f"lethe_upgrade_{uuid.uuid4().hex[:8]}"
    params = conninfo_to_dict(postgres_server)
    admin = make_conninfo("", **{**params, "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    # a URL: the oldest releases take no other form
    yield (
        f"postgresql://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
        f"{params.get('port', '5432')}/{name}"
    )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("driver", ["fs", "seaweed-versioned"])
def test_every_release_upgrades_to_this_one_and_everything_it_held_is_there(driver, own_database, request, tmp_path):
    if driver == "fs":
        store_env = {"LETHE_FILE_FS_ROOT": str(tmp_path / "objects")}
    else:
        from tests.support.stores import make_s3_store

        endpoint = request.getfixturevalue("seaweed_server")
        store = make_s3_store(endpoint, versioned=True, server="seaweed")
        store_env = {
            "LETHE_FILE_STORAGE_DRIVER": "s3",
            "LETHE_FILE_S3_ENDPOINT": endpoint,
            "LETHE_FILE_S3_BUCKET": store.bucket,
            "LETHE_FILE_S3_ACCESS_KEY": "testing",
            "LETHE_FILE_S3_SECRET_KEY": "testing",
            "LETHE_FILE_S3_REGION": "us-east-1",
            "LETHE_FILE_S3_SECURE": "false",
        }
    project = tmp_path / "project"
    project.mkdir()
    inst = Installation(own_database, store_env, project, tmp_path)
    added: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        trees = [(ref, stack.enter_context(release_tree(ref, tmp_path))) for ref, _ in RELEASES]
        trees.append(("this tree", ROOT))
        made = None
        for label, tree in trees:
            with inst.running(tree, label.replace(" ", "-")) as role:
                if made is None:
                    made = make_everything(inst)
                else:
                    check_everything(inst, made, last=tree == ROOT)
                    for earlier in added:  # every later release's files too
                        status, _, body = raw("GET", f"{inst.api}/files/{earlier['kept']}/content", token(ALEX))
                        assert status == 200 and body == earlier["data"], (label, status)
                        assert call("GET", f"{inst.api}/files/{earlier['gone']}", token(ALEX))[0] == 404
                added.append(new_files(inst, label.replace(" ", "-")))
                if tree == ROOT:
                    # the image stored before type detection gets its variants from this release's cleanup
                    deadline = time.monotonic() + 60
                    while not call("GET", f"{inst.api}/files/{made['image.png']}", token(ALEX))[1]["thumbnails"]:
                        assert time.monotonic() < deadline, role.tail()
                        time.sleep(0.2)
                    status_of = inst.command(tree, "restore", "status", "--json")
                    assert status_of.returncode == 0, status_of.stdout + status_of.stderr
                    assert json.loads(status_of.stdout)["reason"] is None
                assert "Traceback" not in role.output(), role.tail()
    with psycopg.connect(own_database) as conn:
        sealed = {str(row[0]): row[1] for row in conn.execute("SELECT id, encrypted FROM files")}
    assert made is not None
    assert sealed[made["attached.txt"]] is False  # written before per-file keys: read as it was stored
    assert sealed[added[-1]["kept"]] is True  # this release seals what it writes, beside the old plaintext
    for output in inst.outputs:
        assert CANARY not in output, "a file name reached a log or a command's output"


@pytest.mark.parametrize("ref", [ref for ref, _ in RELEASES])
def test_this_chart_renders_as_an_upgrade_from_each_releases_documented_values(ref):
    from tests.deploy.test_chart import by_kind, render

    doc = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:docs/deploy.md"], capture_output=True, text=True)
    if doc.returncode != 0:
        pytest.fail(f"the release {ref} is not in this repository's history: {doc.stderr[-300:]}", pytrace=False)
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", doc.stdout, re.S)]
    values = next(block for block in blocks if isinstance(block, dict) and "secrets" in block)
    docs = render(values, upgrade=True)
    config = by_kind(docs, "ConfigMap")[0]["data"]
    # an upgrade keeps the installed release's sealing (these releases' charts sealed nothing, or the release
    # said so itself); the migration job runs first
    assert config["LETHE_FILE_ENCRYPTION"] == "false"
    job = next(d for d in by_kind(docs, "Job") if d["metadata"]["name"].endswith("-migrate"))
    assert "pre-upgrade" in job["metadata"]["annotations"]["helm.sh/hook"]
