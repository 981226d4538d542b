"""Migrations: plain SQL files in app/db/migrations, applied by yoyo-migrations (`lethe migrate`).

yoyo parses its own URL form (one host, one port), while Lethe's database.url is whatever libpq takes: a URL
naming several hosts (`host-a:5432,host-b:5432/lethe?target_session_attrs=read-write`), `host=...` keywords,
a unix socket directory, or `service=`. So yoyo is handed a connection libpq opened from the configured string
as it is, and only its bookkeeping (the `_yoyo_migration` table, its lock) is yoyo's.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from yoyo import read_migrations
from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
from yoyo.connections import DatabaseURI
from yoyo.migrations import default_migration_table

from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.migrate")
MIGRATIONS = Path(__file__).parent / "migrations"


def _backend(conninfo: str) -> PostgresqlPsycopgBackend:
    """yoyo's PostgreSQL backend on a connection libpq opens from `conninfo` (any form libpq takes)."""
    database = conninfo_to_dict(conninfo).get("dbname")

    class LibpqBackend(PostgresqlPsycopgBackend):  # type: ignore[misc]  # yoyo ships no type information
        def connect(self, dburi: Any) -> psycopg.Connection[Any]:
            self.schema = None
            return psycopg.connect(conninfo, autocommit=True)

    # The URI is yoyo's key for a cache of facts about the server; the connection ignores it.
    backend = LibpqBackend(DatabaseURI("postgresql+psycopg", None, None, None, None, database, {}),
                           default_migration_table)
    backend.init_database()
    return backend


def migrate(url: str) -> int:
    """Apply every pending migration under yoyo's lock (safe when two migrate jobs start at once).

    Args:
        url: database.url, in any form libpq takes.

    Returns:
        How many migrations were applied.
    """
    backend = _backend(url)
    try:
        migrations = read_migrations(str(MIGRATIONS))
        with backend.lock():
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
    finally:
        backend.connection.close()
    log_event(log, "info", "db.migrated", "migrations applied", count=len(pending))
    return len(pending)


def known_migrations() -> set[str]:
    """The ids of the migrations this version ships."""
    return {path.name.removesuffix(".sql") for path in MIGRATIONS.glob("*.sql")
            if not path.name.endswith(".rollback.sql")}


def applied_migrations(conn: psycopg.Connection[Any]) -> set[str]:
    """The ids of the migrations applied to the database of `conn` (yoyo's own table; none before the first)."""
    table = conn.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL").fetchone()
    if table is None or not table[0]:
        return set()
    return {row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")}


def pending_migrations(conn: psycopg.Connection[Any]) -> int:
    """How many migrations of this version are not applied to the database of `conn`."""
    return len(known_migrations() - applied_migrations(conn))
