"""database.url in every form libpq takes, through `lethe migrate`, `lethe config check` and a role's pool: a URL
naming several hosts (the first one down, as a standby or a lost primary is), `host=` keywords, a unix socket
directory, and `service=` from a service file. yoyo parses URLs of one host only; Lethe hands it libpq's
connection, so the documented highly available URL migrates like any."""

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
from app.db.migrate import known_migrations
from app.db.pool import Database
from tests.support import zygote
from tests.support.ports import free_port
from tests.support.services import service_missing

SECRET = "url-forms-secret-of-sufficient-length-0123"


@pytest.fixture
def fresh_database(postgres_server):
    """A database of its own, not migrated, and the libpq parameters of its server."""
    name = f"lethe_urls_{uuid.uuid4().hex[:8]}"
    params = conninfo_to_dict(postgres_server)
    admin = make_conninfo("", **{**params, "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        sockets = one(conn.execute("SHOW unix_socket_directories"))[0]
    yield name, params, sockets
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def form(kind: str, name: str, params: dict[str, Any], sockets: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """database.url in one form, and the environment it needs (a service file)."""
    host, port, user = params.get("host", "127.0.0.1"), params.get("port", "5432"), params.get("user", "postgres")
    if kind == "several_hosts":
        # The first host takes no connection (a standby refusing writes, or a primary lost): libpq goes on.
        return (
            f"postgresql://{user}@127.0.0.1:{free_port()},{host}:{port}/{name}"
            "?target_session_attrs=read-write&connect_timeout=3"
        ), {}
    if kind == "keywords":
        return f"host={host} port={port} user={user} dbname={name}", {}
    if kind == "unix_socket":
        directory = next(
            (d.strip() for d in sockets.split(",") if d.strip() and (Path(d.strip()) / f".s.PGSQL.{port}").exists()),
            None,
        )
        if directory is None:
            service_missing("PostgreSQL on a unix socket", "the server listens on no socket this machine can reach")
        return f"postgresql://{user}@/{name}?host={directory}&port={port}", {}
    service_file = tmp_path / "pg_service.conf"
    service_file.write_text(f"[lethe]\nhost={host}\nport={port}\nuser={user}\ndbname={name}\n")
    return "service=lethe", {"PGSERVICEFILE": str(service_file)}


def lethe(args: list[str], env: dict[str, Any], cwd: Path) -> subprocess.CompletedProcess[Any]:
    return zygote.run(
        [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


@pytest.mark.parametrize("kind", ["several_hosts", "keywords", "unix_socket", "service"])
def test_every_form_libpq_takes_migrates_checks_and_serves(fresh_database, kind, tmp_path, monkeypatch):
    name, params, sockets = fresh_database
    url, extra = form(kind, name, params, sockets, tmp_path)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        **extra,
    }
    # When the operator migrates with it
    migrated = lethe(["migrate"], env, tmp_path)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    assert f"applied {len(known_migrations())} migration(s)" in migrated.stdout
    assert "Traceback" not in migrated.stderr and url not in migrated.stderr + migrated.stdout
    # Then it is migrated once (a second run applies nothing) and the configuration check takes it
    again = lethe(["migrate"], env, tmp_path)
    assert again.returncode == 0 and "applied 0 migration(s)" in again.stdout, again.stderr[-2000:]
    checked = lethe(["config", "check"], env, tmp_path)
    assert checked.returncode == 0 and "OK" in checked.stdout, checked.stdout + checked.stderr
    # And a role's pool reads through it
    for variable, value in extra.items():
        monkeypatch.setenv(variable, value)
    db = Database(url, pool_size=1)
    try:
        assert db.read(lambda conn: one(conn.execute("SELECT current_database()"))[0]) == name
    finally:
        db.close()


@pytest.mark.parametrize(
    "value", ["not a connection string", "http://db.example.com/lethe", "postgresql://host:notaport/x"]
)
def test_a_string_libpq_refuses_is_a_configuration_error_naming_the_key_only(value, tmp_path):
    env = {"PATH": os.environ.get("PATH", ""), "LETHE_DATABASE_URL": value, "LETHE_AUTH_JWT_SECRET": SECRET}
    for args in (["config", "check"], ["migrate"]):
        answer = lethe(args, env, tmp_path)
        assert answer.returncode == 2, answer.stdout + answer.stderr
        assert "database.url" in answer.stdout + answer.stderr and value not in answer.stdout + answer.stderr
        assert "Traceback" not in answer.stderr


def test_migrate_against_a_server_that_is_not_there_says_so_without_a_traceback(tmp_path):
    url = f"postgresql://postgres@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/lethe?connect_timeout=2"
    env = {"PATH": os.environ.get("PATH", ""), "LETHE_DATABASE_URL": url, "LETHE_AUTH_JWT_SECRET": SECRET}
    answer = lethe(["migrate"], env, tmp_path)
    assert answer.returncode == 2 and "cannot connect to the server" in answer.stderr, answer.stderr[-2000:]
    assert "Traceback" not in answer.stderr and url not in answer.stderr
