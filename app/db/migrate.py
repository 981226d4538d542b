"""Migrations: plain SQL files in app/db/migrations, applied by yoyo-migrations (`lethe migrate`)."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg

from yoyo import get_backend, read_migrations
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.migrate")
MIGRATIONS = Path(__file__).parent / "migrations"


def yoyo_url(url: str) -> str:
    """yoyo selects psycopg 3 by the scheme `postgresql+psycopg://`."""
    for scheme in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql+psycopg://" + url[len(scheme):]
    raise ValueError("database.url must start with postgresql://")


def migrate(url: str) -> int:
    """Apply every pending migration under yoyo's lock (safe when two migrate jobs start at once).

    Returns:
        How many migrations were applied.
    """
    backend = get_backend(yoyo_url(url))
    migrations = read_migrations(str(MIGRATIONS))
    with backend.lock():
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
    log_event(log, "info", "db.migrated", "migrations applied", count=len(pending))
    return len(pending)


def pending_migrations(conn: psycopg.Connection) -> int:
    """How many migrations of this version are not applied to the database of `conn` (yoyo's own table)."""
    known = {path.name.removesuffix(".sql") for path in MIGRATIONS.glob("*.sql")
             if not path.name.endswith(".rollback.sql")}
    table = conn.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL").fetchone()
    if table is None or not table[0]:
        return len(known)
    applied = {row[0] for row in conn.execute("SELECT migration_id FROM _yoyo_migration")}
    return len(known - applied)
