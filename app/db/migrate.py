"""Migrations: plain SQL files in app/db/migrations, applied by yoyo-migrations (`lethe migrate`).

yoyo parses its own URL form (one host, one port), while Lethe's database.url is whatever libpq takes: a URL
naming several hosts (`host-a:5432,host-b:5432/lethe?target_session_attrs=read-write`), `host=...` keywords,
a unix socket directory, or `service=`. So yoyo is handed a connection libpq opened from the configured string
as it is, and only its bookkeeping (the `_yoyo_migration` table, its lock) is yoyo's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # yoyo is imported by what applies or undoes migrations; every process checks the schema
    from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend

log = logging.getLogger("lethe.migrate")
MIGRATIONS = Path(__file__).parent / "migrations"


def _backend(conninfo: str) -> PostgresqlPsycopgBackend:
    """yoyo's PostgreSQL backend on a connection libpq opens from `conninfo` (any form libpq takes)."""
    from yoyo.backends.core.postgresql import PostgresqlPsycopgBackend
    from yoyo.connections import DatabaseURI
    from yoyo.migrations import default_migration_table

    database = conninfo_to_dict(conninfo).get("dbname")

    class LibpqBackend(PostgresqlPsycopgBackend):  # type: ignore[misc]  # yoyo ships no type information
        def connect(self, dburi: Any) -> psycopg.Connection[Any]:
            self.schema = None
            return psycopg.connect(conninfo, autocommit=True)

    # The URI is yoyo's key for a cache of facts about the server; the connection ignores it.
    backend = LibpqBackend(
        DatabaseURI("postgresql+psycopg", None, None, None, None, database, {}), default_migration_table
    )
    backend.init_database()
    return backend


class SchemaTooNew(Exception):
    """The database has migrations this release does not ship: a newer release migrated it (a rollback)."""

    def __init__(self, unknown: Sequence[str]):
        super().__init__(", ".join(unknown))
        self.unknown = tuple(unknown)


@dataclass(frozen=True)
class Schema:
    """The database's migrations against this release's: those it lacks, and those it has that this release
    does not know (a newer release applied them)."""

    pending: tuple[str, ...]
    unknown: tuple[str, ...]

    def problem(self) -> str | None:
        """What is wrong, in words an operator can act on, or None."""
        if self.unknown:
            return too_new(self.unknown)
        if self.pending:
            return (
                f"the database is not migrated ({len(self.pending)} migration(s) pending): run `lethe migrate` "
                "with the same configuration first."
            )
        return None


def too_new(unknown: Sequence[str]) -> str:
    """The sentence that refuses a database migrated by a newer release, naming both sides."""
    return (
        f"the database was migrated by a newer release of Lethe: it has migration(s) {', '.join(unknown)}, "
        f"which this release (migrations up to {latest_migration()}) does not know. Nothing was changed. Run "
        "the newer release again (roll forward), or first run that release's down-migrations "
        "(docs/operations.md, 'Rolling back a release')."
    )


def latest_migration() -> str:
    """The last migration this release ships."""
    return max(known_migrations())


def schema_of(conn: psycopg.Connection[Any]) -> Schema:
    """The database of `conn` against this release's migrations."""
    applied, known = applied_migrations(conn), known_migrations()
    return Schema(pending=tuple(sorted(known - applied)), unknown=tuple(sorted(applied - known)))


def migrate(url: str) -> int:
    """Apply every pending migration under yoyo's lock (safe when two migrate jobs start at once). A database
    that has migrations this release does not ship is refused before anything is applied.

    Args:
        url: database.url, in any form libpq takes.

    Returns:
        How many migrations were applied.

    Raises:
        SchemaTooNew: a newer release migrated the database.
    """
    from yoyo import read_migrations

    backend = _backend(url)
    try:
        migrations = read_migrations(str(MIGRATIONS))
        with backend.lock():
            unknown = schema_of(backend.connection).unknown
            if unknown:
                raise SchemaTooNew(unknown)
            pending = backend.to_apply(migrations)
            backend.apply_migrations(pending)
    finally:
        backend.connection.close()
    log_event(log, "info", "db.migrated", "migrations applied", count=len(pending))
    return len(pending)


def roll_back_to(url: str, target: str, dry_run: bool = False) -> list[str]:
    """Run this release's down-migrations of every migration applied after `target`, newest first, under yoyo's
    lock: what a rollback to the release whose last migration is `target` needs first. A down-migration that
    refuses (0021's while files are sealed) stops there, with the ones before it rolled back.

    Args:
        url: database.url, in any form libpq takes.
        target: the last migration to keep (the older release's last: its `lethe migrate` says it).
        dry_run: name them, run none.

    Returns:
        The migrations rolled back (or, in a dry run, that would be).

    Raises:
        ValueError: this release ships no migration `target`. SchemaTooNew: a newer release than this one
            migrated the database (its own down-migrations must run first). psycopg.Error: a down-migration
            refused.
    """
    if target not in known_migrations():
        raise ValueError(target)
    from yoyo import read_migrations

    backend = _backend(url)
    try:
        migrations = read_migrations(str(MIGRATIONS))
        with backend.lock():
            unknown = schema_of(backend.connection).unknown
            if unknown:
                raise SchemaTooNew(unknown)
            undo = [migration for migration in backend.to_rollback(migrations) if migration.id > target]
            if not dry_run:
                for migration in undo:
                    backend.rollback_one(migration)
                    log_event(log, "warning", "db.rolled_back", "a migration was rolled back", migration=migration.id)
    finally:
        backend.connection.close()
    return [migration.id for migration in undo]


def known_migrations() -> set[str]:
    """The ids of the migrations this version ships."""
    return {
        path.name.removesuffix(".sql") for path in MIGRATIONS.glob("*.sql") if not path.name.endswith(".rollback.sql")
    }


def applied_migrations(conn: psycopg.Connection[Any]) -> set[str]:
    """The ids of the migrations applied to the database of `conn` (yoyo's own table; none before the first)."""
    table = conn.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL").fetchone()
    if table is None or not table[0]:
        return set()
    return {row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")}


def pending_migrations(conn: psycopg.Connection[Any]) -> int:
    """How many migrations of this version are not applied to the database of `conn`."""
    return len(known_migrations() - applied_migrations(conn))


class SchemaGuard:
    """A checkout hook of a role's pool: the first connection that answers is compared with this release's
    migrations before anything is served or changed through it (a role that started while the database was
    unreachable could not check at its start). Once the schema was found right, the guard stands aside: a
    rolling upgrade migrates the database under processes that were right when they started, and they go on."""

    def __init__(self) -> None:
        self.refused: Schema | None = None
        self._verified = False

    @property
    def verified(self) -> bool:
        """The schema was found this release's (the guard stands aside from now on)."""
        return self._verified

    def __call__(self, conn: psycopg.Connection[Any]) -> bool:
        if self._verified:
            return True
        schema = schema_of(conn)
        problem = schema.problem()
        if problem is None:
            self._verified, self.refused = True, None
            return True
        if self.refused != schema:
            log_event(
                log,
                "error",
                "db.schema_refused",
                "the database's migrations are not this release's: nothing is served from it",
                unknown=list(schema.unknown),
                pending=len(schema.pending),
            )
        self.refused = schema
        from app.errors import SchemaMismatch

        raise SchemaMismatch("schema_too_new" if schema.unknown else "schema_not_migrated", problem)
