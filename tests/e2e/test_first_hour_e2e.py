"""A newcomer's first hour, through real processes: Ctrl-C in the middle of uploads and `make run` again frees at
once what the dead process held and left (a tus PATCH's write hold, a part half written to `.tmp`, empty
directories, its lock file); the start-up banner with the token comes again after the start-up cleanup's lines;
the root of the api points at its docs."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg
import pytest

from app.db.conn import one
from app.domain.tus import encode_metadata
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import call
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def stalled(port: int, request: bytes) -> socket.socket:
    """A request whose body stops half-way, its connection kept open: a client still sending."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(request)
    return conn


def until(condition, timeout: float = 30, role: Role | None = None):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, role.tail() if role else "timed out"
        time.sleep(0.05)
    return value


def test_ctrl_c_during_uploads_then_make_run_again_frees_and_cleans_at_once(database_url, tmp_path):
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_PART_SIZE": "1024",
    }  # no secret: lethe dev makes its own and prints a token
    here = tmp_path / "project"
    here.mkdir()
    api_v1 = f"http://127.0.0.1:{port}/api/v1"
    objects = here / ".lethe" / "objects"
    first = Role(["dev", "--port", str(port)], env, tmp_path / "dev-1.log", cwd=here)
    second = None
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", first)
        token = mint_token(
            (here / ".lethe" / "jwt_secret").read_text().strip(), uuid.uuid4(), ("files:read", "files:write")
        )
        # Given a tus PATCH that holds its upload and a native part half written, both still sending
        tus = urllib.request.urlopen(
            urllib.request.Request(
                f"{api_v1}/tus",
                method="POST",
                headers={
                    "Authorization": f"Bearer {token}",
                    "Tus-Resumable": "1.0.0",
                    "Upload-Length": "3000",
                    "Upload-Metadata": encode_metadata({"filename": "big.txt"}),
                },
            )
        )
        tus_id = tus.headers["Location"].rsplit("/", 1)[1]
        patching = stalled(
            port,
            (
                f"PATCH /api/v1/tus/{tus_id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                "Tus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream"
                "\r\nContent-Length: 3000\r\n\r\n"
            ).encode()
            + b"a" * 1500,
        )
        status, created = call(
            "POST", f"{api_v1}/uploads", token, {"name": "part.txt", "size_bytes": 1000, "mime_type": "text/plain"}
        )
        assert status == 201, created
        native_id = created["file"]["id"]
        putting = stalled(
            port,
            (
                f"PUT /api/v1/uploads/{native_id}/parts/1 HTTP/1.1\r\nHost: x\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\n"
                "Content-Length: 1000\r\n\r\n"
            ).encode()
            + b"b" * 400,
        )
        with psycopg.connect(database_url, autocommit=True) as conn:
            until(
                lambda: one(conn.execute("SELECT writing_since FROM upload_sessions WHERE file_id = %s", (tus_id,)))[0],
                role=first,
            )
        until(lambda: any((objects / ".tmp").iterdir()) if (objects / ".tmp").exists() else False, role=first)
        (objects / "f" / "ab" / "cd").mkdir(parents=True)  # a directory a dead write left empty
        # When it is stopped with Ctrl-C while both still send
        assert first.stop(signal.SIGINT) == 0
        patching.close()
        putting.close()
        assert not (here / ".lethe" / "dev.lock").exists() and not (here / ".lethe" / "dev.json").exists()
        with psycopg.connect(database_url, autocommit=True) as conn:  # the dead process's hold is still there
            assert (
                one(conn.execute("SELECT writing_since FROM upload_sessions WHERE file_id = %s", (tus_id,)))[0]
                is not None
            )
        # Then `make run` again frees and cleans at once: the resumed PATCH is taken, nothing is left behind
        second = Role(["dev", "--port", str(port)], env, tmp_path / "dev-2.log", cwd=here)
        wait_for_http(f"http://127.0.0.1:{port}/readyz", second)
        head = urllib.request.urlopen(
            urllib.request.Request(
                f"{api_v1}/tus/{tus_id}",
                method="HEAD",
                headers={"Authorization": f"Bearer {token}", "Tus-Resumable": "1.0.0"},
            )
        )
        offset = int(head.headers["Upload-Offset"])
        resumed = urllib.request.urlopen(
            urllib.request.Request(
                f"{api_v1}/tus/{tus_id}",
                method="PATCH",
                data=b"a" * (3000 - offset),
                headers={
                    "Authorization": f"Bearer {token}",
                    "Tus-Resumable": "1.0.0",
                    "Upload-Offset": str(offset),
                    "Content-Type": "application/offset+octet-stream",
                },
            )
        )
        assert resumed.status == 204 and resumed.headers["Upload-Offset"] == "3000"
        assert list((objects / ".tmp").iterdir()) == []
        assert not (objects / "f" / "ab").exists()
        assert "dev.cleaned" in second.output()
        # The banner with the token comes again after the start-up cleanup's lines; the root points at the docs
        output = until(lambda: second.output() if second.output().count("export TOKEN=") == 2 else None, role=second)
        last_step = output.index("step=n ")  # the first run's last step line
        assert output.rfind("export TOKEN=") > last_step > output.find("export TOKEN=")
        root = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/").read())
        assert root["docs"] == "/docs" and root["openapi"] == "/openapi.json"
    finally:
        if second is not None:
            second.stop(signal.SIGTERM)
        first.kill()
