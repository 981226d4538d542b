"""`lethe dev` (make run) decides sealing as the chart does: a new installation seals every file and says where its
keyring is; an installation whose files are not sealed (made before per-file keys, or with sealing off) stays as
it was unless the operator says otherwise; a start that refuses leaves no keyring behind."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest

from app.db.conn import one
from app.entry.token import mint_token
from tests.e2e.test_deletion_e2e import upload
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SECRET = "dev-sealing-secret-of-sufficient-length-0123"


def start(folder: Path, database_url: str, tmp_path: Path, label: str, **extra: str) -> tuple[Role, str]:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        **extra,
    }
    folder.mkdir(exist_ok=True)
    role = Role(["dev", "--port", str(port)], env, tmp_path / f"dev-{label}.log", cwd=folder)
    return role, f"http://127.0.0.1:{port}"


def sealed_of(database_url: str, file_id: str) -> bool:
    with psycopg.connect(database_url) as conn:
        return one(conn.execute("SELECT encrypted FROM files WHERE id = %s", (file_id,)))[0]


def test_an_installation_without_sealing_keeps_it_and_a_new_one_seals_saying_where_the_keyring_is(
    database_url, tmp_path
):
    token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
    here = tmp_path / "project"
    # Given an installation whose files are not sealed (sealing off, as releases before per-file keys ran)
    role, base = start(here, database_url, tmp_path, "off", LETHE_FILE_ENCRYPTION="off")
    wait_for_http(base + "/readyz", role)
    plain = upload(base + "/api/v1", token, "plain.txt")
    role.stop()
    # When lethe dev starts again without a word about sealing
    role, base = start(here, database_url, tmp_path, "again")
    wait_for_http(base + "/readyz", role)
    later = upload(base + "/api/v1", token, "later.txt")
    role.stop()
    # Then it keeps the installation's setting, says so in one line, and makes no keyring
    assert not sealed_of(database_url, plain) and not sealed_of(database_url, later)
    said = [line for line in role.output().splitlines() if "not sealed" in line]
    assert len(said) == 1 and "LETHE_FILE_ENCRYPTION=on" in said[0], role.tail()
    assert not (here / ".lethe" / "keyring").exists()


def test_a_new_installation_seals_and_a_refused_start_from_another_folder_leaves_no_keyring(database_url, tmp_path):
    token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write"))
    first, second = tmp_path / "first", tmp_path / "second"
    role, base = start(first, database_url, tmp_path, "new")
    wait_for_http(base + "/readyz", role)
    sealed = upload(base + "/api/v1", token, "sealed.txt")
    role.stop()
    assert sealed_of(database_url, sealed)
    keyring = first / ".lethe" / "keyring"
    assert keyring.exists()
    said = [line for line in role.output().splitlines() if "keyring is" in line]
    assert len(said) == 1 and str(keyring) in said[0], role.tail()
    # A second folder on the same database has no key for the sealed file: it refuses and leaves nothing behind
    role, base = start(second, database_url, tmp_path, "other")
    assert role.proc.wait(60) == 2, role.tail()
    assert "file.keyring" in role.output() and "Traceback" not in role.output(), role.tail()
    assert "keyring is" not in role.output()  # no keyring to keep was announced
    assert not (second / ".lethe" / "keyring").exists()
