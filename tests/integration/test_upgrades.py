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
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.db.conn import one
from app.db.migrate import latest_migration, migrate
from tests.support import zygote
from tests.support.keyring import SEALED_ENV
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
FUTURE = "0999.from_a_newer_release"
SECRET = "upgrade-secret-of-sufficient-length-012345"


@pytest.fixture(scope="module")
def newer_template(postgres_server):
    """A database migrated by this release, then by a newer one (one migration more): made once, copied per test."""
    name = f"lethe_newer_template_{uuid.uuid4().hex[:8]}"
    admin = make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": name})
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) VALUES (%s, %s, now())",
            (uuid.uuid4().hex, FUTURE),
        )
    yield name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def newer_database(postgres_server, newer_template):
    """A database of its own, as a newer release left it (a copy of the template)."""
    name = f"lethe_newer_{uuid.uuid4().hex[:8]}"
    admin = make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{newer_template}"')
    url = make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": name})
    with psycopg.connect(url, autocommit=True) as conn:
        applied = [row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")]
    assert FUTURE in applied
    before = len(applied)
    yield url
    with psycopg.connect(url, autocommit=True) as conn:  # nothing was applied or changed by any of them
        assert one(conn.execute("SELECT count(*) FROM _yoyo_migration"))[0] == before
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


COMMANDS = [
    ["migrate"],
    ["config", "check"],
    ["api"],
    ["worker"],
    ["scheduler"],
    ["dev"],
    ["cleanup", "--dry-run"],
    ["retention", "run", "--dry-run"],
    ["sweep", "run", "--dry-run"],
    ["audit"],
    ["hold", "list"],
    ["webhooks", "list"],
    ["restore", "status"],
    ["keys", "status"],
    ["receipt", "5f0e6a8e-4c59-4d0e-9c0b-3c1f4b7d2a10"],
    ["erase", "--subject", "1b7c9e52-7d3a-4a45-8f0e-2d6c5b9a8e31"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_every_role_and_command_refuses_a_database_a_newer_release_migrated(
    command, newer_database, broker_url, tmp_path
):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LETHE_DATABASE_URL": newer_database,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "LETHE_API_PORT": str(free_port()),
        "LETHE_METRICS_PORT": str(free_port()),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "PYTHONPATH": str(ROOT),
        **SEALED_ENV,
    }
    (tmp_path / "metrics").mkdir()
    done = zygote.run(
        [sys.executable, "-m", "app.entry", *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 2, said[-3000:]
    assert FUTURE in said and latest_migration() in said, said[-3000:]
    assert "Traceback" not in said
    assert "roll forward" in said or "down-migrations" in said


def test_a_role_that_started_while_the_database_was_away_refuses_it_at_its_first_connection(newer_database):
    """The start-up check could not ask the database; the pool's first connection asks before it is used:
    requests answer 503 schema_too_new and /readyz never turns ready."""
    import tempfile

    from app.platform.clock import FakeClock
    from app.storage.fs import FsStore
    from tests.support.lethe import ALEX, Lethe

    lethe = Lethe(newer_database, FsStore(tempfile.mkdtemp()), FakeClock())
    try:
        answer = lethe.call("GET", "/api/v1/files", ALEX)
        assert answer.status_code == 503 and answer.json["reason"] == "schema_too_new", answer.json
        assert FUTURE in answer.json["detail"]
        ready = lethe.app.test_client().get("/readyz")
        assert ready.status_code == 503 and (ready.json or {})["reason"] == "schema_too_new", ready.json
    finally:
        lethe.close()


@pytest.fixture
def own_database(postgres_server):
    """A database of its own, not migrated."""
    name = f"lethe_down_{uuid.uuid4().hex[:8]}"
    admin = make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo("", **{**conninfo_to_dict(postgres_server), "dbname": name})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def lethe_migrate(url: str, *args: str) -> subprocess.CompletedProcess[Any]:
    env = {"PATH": os.environ.get("PATH", ""), "LETHE_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return zygote.run(
        [sys.executable, "-m", "app.entry", "migrate", *args], capture_output=True, text=True, env=env, timeout=120
    )


def applied(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")}


def test_every_migration_rolls_back_and_applies_again(own_database):
    """The down-migrations a rollback runs are real SQL that works: all of them, newest first, then up again."""
    from app.db.migrate import known_migrations

    assert lethe_migrate(own_database).returncode == 0
    first = min(known_migrations())
    planned = lethe_migrate(own_database, "--down-to", first, "--dry-run")
    assert planned.returncode == 0 and "would roll back" in planned.stdout, planned.stderr
    assert applied(own_database) == known_migrations()  # a dry run runs none
    down = lethe_migrate(own_database, "--down-to", first)
    assert down.returncode == 0, down.stderr
    assert applied(own_database) == {first}
    assert f"rolled back {len(known_migrations()) - 1} migration(s)" in down.stdout
    up = lethe_migrate(own_database)
    assert up.returncode == 0, up.stderr
    assert applied(own_database) == known_migrations()
    unknown = lethe_migrate(own_database, "--down-to", "0000.nothing")
    assert unknown.returncode == 2 and "ships no migration 0000.nothing" in unknown.stderr


def test_the_down_migration_of_per_file_keys_refuses_while_a_file_is_sealed(own_database):
    import tempfile

    from app.platform.clock import FakeClock
    from app.storage.fs import FsStore
    from tests.support.lethe import ALEX, Lethe

    migrate(own_database)
    lethe = Lethe(own_database, FsStore(tempfile.mkdtemp()), FakeClock())
    try:
        lethe.upload(ALEX)  # sealed: the suite runs as a new installation does
    finally:
        lethe.close()
    refused = lethe_migrate(own_database, "--down-to", "0020.journal")
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2 and "sealed" in said and "Traceback" not in said, said
    assert "0021.file_keys" in applied(own_database)  # the keys stay; what came after went first
    assert lethe_migrate(own_database).returncode == 0
