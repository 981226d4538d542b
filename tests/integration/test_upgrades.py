"""Upgrades and rollbacks: a database migrated by a newer release than the code (what `helm rollback` leaves, since
the chart's migration job runs at install and upgrade only) is refused by every role and every command before it
serves or changes anything, naming the migration it does not know; a role that started while the database was
unreachable checks its first connection the same way, and /readyz never turns ready on such a database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.db.migrate import latest_migration, migrate
from app.entry.embedded_pg import free_port
from tests.support.keyring import SEALED_ENV

ROOT = Path(__file__).resolve().parents[2]
FUTURE = "0999.from_a_newer_release"
SECRET = "upgrade-secret-of-sufficient-length-012345"


@pytest.fixture
def newer_database(postgres_server):
    """A database of its own, migrated by this release, then by a newer one (one migration more)."""
    name = f"lethe_newer_{uuid.uuid4().hex[:8]}"
    admin = make_conninfo(**{**conninfo_to_dict(postgres_server), "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(**{**conninfo_to_dict(postgres_server), "dbname": name})
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) "
                     "VALUES (%s, %s, now())", (uuid.uuid4().hex, FUTURE))
        before = conn.execute("SELECT count(*) FROM _yoyo_migration").fetchone()[0]
    yield url
    with psycopg.connect(url, autocommit=True) as conn:  # nothing was applied or changed by any of them
        assert conn.execute("SELECT count(*) FROM _yoyo_migration").fetchone()[0] == before
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


COMMANDS = [
    ["migrate"], ["config", "check"], ["api"], ["worker"], ["scheduler"], ["dev"],
    ["cleanup", "--dry-run"], ["retention", "run", "--dry-run"], ["sweep", "run", "--dry-run"], ["audit"],
    ["hold", "list"], ["webhooks", "list"], ["restore", "status"], ["keys", "status"],
    ["receipt", "5f0e6a8e-4c59-4d0e-9c0b-3c1f4b7d2a10"], ["erase", "--subject", "1b7c9e52-7d3a-4a45-8f0e-2d6c5b9a8e31"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_every_role_and_command_refuses_a_database_a_newer_release_migrated(command, newer_database, broker_url,
                                                                             tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "LETHE_DATABASE_URL": newer_database,
           "LETHE_BROKER_URL": broker_url, "LETHE_AUTH_JWT_SECRET": SECRET,
           "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"), "LETHE_API_PORT": str(free_port()),
           "LETHE_METRICS_PORT": str(free_port()), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
           "PYTHONPATH": str(ROOT), **SEALED_ENV}
    (tmp_path / "metrics").mkdir()
    done = subprocess.run([sys.executable, "-m", "app.entry", *command], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert FUTURE in said and latest_migration() in said, said[-3000:]
    assert "Traceback" not in said
    assert "roll forward" in said or "down-migrations" in said


def test_a_role_that_started_while_the_database_was_away_refuses_it_at_its_first_connection(newer_database):
    """The start-up check could not ask the database; the pool's first connection asks before it is used:
    requests answer 503 schema_too_new and /readyz never turns ready."""
    from app.platform.clock import FakeClock
    from app.storage.fs import FsStore
    from tests.support.lethe import ALEX, Lethe

    import tempfile

    lethe = Lethe(newer_database, FsStore(tempfile.mkdtemp()), FakeClock())
    try:
        answer = lethe.call("GET", "/api/v1/files", ALEX)
        assert answer.status_code == 503 and answer.json["reason"] == "schema_too_new", answer.json
        assert FUTURE in answer.json["detail"]
        ready = lethe.app.test_client().get("/readyz")
        assert ready.status_code == 503 and ready.json["reason"] == "schema_too_new", ready.json
    finally:
        lethe.close()
