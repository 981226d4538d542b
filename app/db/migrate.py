"""Migrations: plain SQL files in app/db/migrations, applied by yoyo-migrations (`lethe migrate`)."""

from __future__ import annotations

import logging
from pathlib import Path

from yoyo import get_backend, read_migrations
from app.logs import log_event

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
