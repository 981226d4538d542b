"""Shared start-up steps of every role: load the configuration or exit 2 naming the keys (D14)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from app.errors import ConfigError
from app.platform import config
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.platform.config.tree import Config

EXIT_CONFIG = 2


def setup_role_logging(role: str, cfg: Config, fmt: str | None = None, stream: TextIO | None = None) -> None:
    """Logs (json, or console) and Sentry for a role or a command."""
    from app.platform.observability.log_setup import setup_logging
    from app.platform.observability.sentry import setup_sentry

    setup_logging(role, fmt or cfg.log.format, cfg.log.level, stream)
    setup_sentry(cfg.sentry.dsn, role)


def print_config_errors(error: ConfigError, stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    print("lethe: bad configuration:", file=stream)
    for key, messages in sorted(error.errors.items()):
        env = config.KEYS_BY_NAME[key].env if key in config.KEYS_BY_NAME else None
        where = f" ({env})" if env else ""
        print(f"  {key}{where}: {' '.join(messages)}", file=stream)


def load_config_or_exit(role: str, environ: Mapping[str, str] | None = None) -> config.Config:
    """Load the configuration; on any error print every bad key (never a value) and exit with status 2."""
    from app.platform import tracing

    try:
        loaded = config.load(environ)
    except ConfigError as exc:
        print_config_errors(exc)
        sys.exit(EXIT_CONFIG)
    otel = tracing.config_errors(environ)  # the OTEL_* variables Lethe cannot honour, by name
    if otel:
        print_config_errors(ConfigError(otel))
        sys.exit(EXIT_CONFIG)
    return loaded


OBJECT_LOCK_MESSAGE = (
    "The bucket has object lock configured: retention or a legal hold can keep a deleted "
    "file's bytes, so Lethe cannot guarantee deletion of a file stored as it is. Use a bucket "
    "without object lock, or turn file.encryption on: a deleted file's locked versions then stay "
    "sealed under a data key that no longer exists."
)


def inspect_store_or_exit(cfg: config.Config, role: str) -> None:
    """Read what the store keeps (D16) before a role that touches it starts: log versioning and object lock
    (no secret, no bucket content), and exit 2 naming file.s3.bucket when object lock is on while new files are
    stored as they are (file.encryption off). An unreachable store is logged and the role starts: the driver
    deletes every version until it could read versioning."""
    import logging

    from app.entry.wiring import build_store
    from app.errors import StorageError

    if cfg.file.storage.driver != "s3":
        return
    log = logging.getLogger("lethe.storage")
    try:
        facts = build_store(cfg).describe()
    except StorageError as exc:
        log_event(
            log,
            "warning",
            "storage.inspect_failed",
            "the store could not be inspected; deletes remove every version until it can",
            role=role,
            error=str(exc),
        )
        return
    log_event(log, "info", "storage.inspected", "store inspected", **facts)
    if facts["object_lock"] == "enabled" and not cfg.file.encryption:
        print_config_errors(ConfigError({"file.s3.bucket": [OBJECT_LOCK_MESSAGE]}))
        sys.exit(EXIT_CONFIG)


AUTOVACUUM_OFF = (
    "autovacuum is off for {where}: a deleted row's bytes (a file name among them) stay readable in "
    "the table's file until VACUUM runs; turn autovacuum on, or run VACUUM after deletions "
    "(docs/deletion.md, 'What survives')"
)


def autovacuum_off(url: str) -> list[str]:
    """Where autovacuum is off for Lethe's database (`server`, or table names); empty when it is on or the
    database cannot be asked (the role's own checks report an unreachable database)."""
    import psycopg
    from psycopg.rows import namedtuple_row

    from app.db.vacuum import autovacuum_off as read

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3, row_factory=namedtuple_row) as conn:
            return read(conn)
    except psycopg.Error:
        return []


def warn_if_autovacuum_off(cfg: Config, role: str) -> None:
    """At a role's start: one warning when autovacuum is off for the server or a table of Lethe's."""
    import logging

    off = autovacuum_off(cfg.database.url) if cfg.database.url else []
    if off:
        log_event(
            logging.getLogger("lethe.db"),
            "warning",
            "db.autovacuum_off",
            AUTOVACUUM_OFF.format(where=", ".join(off)),
            role=role,
            where=off,
        )


def keyring_problem(cfg: config.Config) -> ConfigError | None:
    """The keyring against the database: a ConfigError naming file.keyring and the key ids live files need that
    it lacks, or holds under another key (one that opens none of a few data keys of its id), by id only, never a
    key; or None (also when the database cannot be asked, or is not migrated yet: the role's own checks say so)."""
    import psycopg
    from psycopg.rows import namedtuple_row

    from app.db.file_keys import key_ids_in_use, some_wrapped_by
    from app.lifecycle.keys import missing_key_ids, opens_any
    from app.platform.keys import Keyring

    if not cfg.database.url:
        return None
    ring = Keyring(cfg.file.keyring)
    try:
        with psycopg.connect(cfg.database.url, autocommit=True, connect_timeout=3, row_factory=namedtuple_row) as conn:
            used = key_ids_in_use(conn)
            wrong = [
                key_id
                for key_id in used
                if key_id in ring and not opens_any(ring, some_wrapped_by(conn, key_id, _KEY_PROBES))
            ]
    except psycopg.Error:
        return None
    missing = missing_key_ids(used, ring)
    problems = []
    if missing:
        problems.append(
            f"Live files need the key id(s) {', '.join(missing)}, which the keyring does not hold: put the key(s) "
            "back. A key may leave the keyring only once no live file needs it (lethe keys rotate, then lethe keys "
            "status); see docs/operations.md, 'Keys'."
        )
    if wrong:
        problems.append(
            f"The keyring's key(s) {', '.join(wrong)} open none of the data keys they are said to have wrapped: "
            "another key stands under that id (a keyring made again?). Put the key that wrapped them back under "
            "its id; see docs/operations.md, 'Keys'."
        )
    return ConfigError({"file.keyring": problems}) if problems else None


_KEY_PROBES = 3  # data keys of each key id opened at a role's start


def check_keyring_or_exit(cfg: config.Config) -> None:
    """At a role's start: exit 2 naming file.keyring and the key ids it lacks or holds wrong (keyring_problem)."""
    problem = keyring_problem(cfg)
    if problem is not None:
        print_config_errors(problem)
        sys.exit(EXIT_CONFIG)


def database_problem(url: str) -> str | None:
    """What is wrong with the database an operator command would use, in words an operator can act on, or None.
    Never the URL, its user or its password: only what failed and what to run."""
    import psycopg

    from app.db.migrate import schema_of

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            schema = schema_of(conn)
    except psycopg.OperationalError as exc:
        return connect_failure(exc)
    except psycopg.Error as exc:
        return f"the database answered an error ({type(exc).__name__})."
    return schema.problem()


def schema_problem(url: str) -> str | None:
    """The database's migrations against this release's, when it answers (a newer release migrated it: a
    rollback; or it is not migrated), or None (also when it does not answer: an outage is no configuration
    error)."""
    import psycopg

    from app.db.migrate import schema_of

    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            return schema_of(conn).problem()
    except psycopg.Error:
        return None


def check_schema_or_exit(url: str) -> None:
    """At a role's start: exit 2 when the database answers and its migrations are not this release's. A
    database that does not answer: the role starts, and its first connection is checked (app/db/migrate.py
    SchemaGuard) before anything is served or changed."""
    problem = schema_problem(url)
    if problem is not None:
        print(f"lethe: database.url (LETHE_DATABASE_URL): {problem}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)


def connect_failure(exc: Exception) -> str:
    """Why a connection to the database failed, in words an operator can act on (never the URL)."""
    sqlstate = getattr(exc, "sqlstate", None)
    return _connect_failure(sqlstate or _sqlstate_of_connect_error(str(exc)))


def _sqlstate_of_connect_error(message: str) -> str | None:
    """libpq reports a refused connection without a SQLSTATE; the server's FATAL line says which (read here,
    never printed: it names the database and the user)."""
    if "database" in message and "does not exist" in message:
        return "3D000"
    if "authentication failed" in message or "no pg_hba.conf entry" in message:
        return "28P01"
    if "the database system is starting up" in message or "shutting down" in message:
        return "57P03"
    return None


def _connect_failure(sqlstate: str | None) -> str:
    if sqlstate == "3D000":
        return "the database named in the URL does not exist on that server (create it, or fix the name)."
    if sqlstate in ("28P01", "28000"):
        return "the server refused the user or password in the URL (authentication failed)."
    if sqlstate == "57P03":
        return "the server is starting up or shutting down; try again in a moment."
    return (
        "cannot connect to the server (refused, unreachable or timed out): is PostgreSQL running at that host and port?"
    )


def check_database_or_exit(url: str) -> None:
    """Exit 2 with a sentence naming database.url and what is wrong, without a traceback."""
    problem = database_problem(url)
    if problem is not None:
        print(f"lethe: database.url (LETHE_DATABASE_URL): {problem}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)
