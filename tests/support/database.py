"""The suite's databases: one per session, created on the server the tests are given, and emptied between tests."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.pq import TransactionStatus

# Every table a test may write, children before the tables they reference (one DELETE each, in one transaction).
TABLES = (
    "store_move_failures",
    "store_migrations",
    "store_copies",
    "erasure_files",
    "erasures",
    "slots",
    "receipts",
    "schedule_runs",
    "attachments",
    "messages",
    "upload_parts",
    "upload_sessions",
    "purge_failures",
    "drafts",
    "events",
    "outbox",
    "legal_holds",
    "multipart_aborts",
    "webhook_deliveries",
    "webhook_endpoints_disabled",
    "journal_pending",
    "file_variants",
    "files",
    "quotas",
    "principal_usage",  # after files: removing files counts them off
    "rate_counts",
    "console_grants",
    "console_sessions",
    "cleanup_steps",
)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_test_database(server_url: str, name: str) -> str:
    """Create the session's database on the server of server_url; returns the URL it was created through.
    The database named in the URL need not exist: the suite only needs the server, so when the URL's own
    database cannot be reached it tries the server's `postgres` database (issue 14) before giving up."""
    error: psycopg.OperationalError | None = None
    for admin_url in (server_url, with_database(server_url, "postgres")):
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
                # The suite's database is thrown away at the end: a commit need not wait for its WAL to reach the
                # disk (a crash of the server loses it either way). What sessions see is the same; the drills
                # that crash a server run clusters of their own, with it on.
                conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
                return admin_url
        except psycopg.OperationalError as exc:
            error = exc
    assert error is not None
    raise error


_EMPTYING: dict[str, psycopg.Connection[Any]] = {}  # by URL: one connection of this process empties its database


def _emptying_connection(url: str) -> psycopg.Connection[Any]:
    """The connection that empties the database of `url`, kept open between tests: a new server process per test
    cost the server more than the DELETEs (its catalog caches, the triggers' plans, all cold again)."""
    conn = _EMPTYING.get(url)
    if conn is not None:
        try:
            if conn.info.transaction_status == TransactionStatus.IDLE:
                conn.execute("SELECT 1")  # the database may have been dropped, restored or its server restarted
                return conn
        except psycopg.Error:
            pass
        conn.close()
    _EMPTYING[url] = conn = psycopg.connect(url, autocommit=True)
    return conn


def truncate_all(url: str) -> None:
    """Empty every table and restart its sequences: a DELETE of each in one transaction takes a few milliseconds
    where a TRUNCATE of eighteen tables took fifty (it rewrites each table's files), and the tables are small."""
    conn = _emptying_connection(url)
    with conn.transaction():
        for table in TABLES:
            conn.execute(f"DELETE FROM {table}")
        # each test has a store of its own, so a journal of its own: the database starts at its beginning
        conn.execute(
            "UPDATE journal_state SET position = 0, reconciled_to = 0, restore_seen_at = NULL, "
            "reconciled_at = NULL, installation_id = gen_random_uuid(), writing_first = NULL, writing_last = NULL, "
            "writing_until = NULL, writing_by = NULL, head_digest = NULL, damaged = NULL, "
            "foreign_installations = '{}', adopted_from = NULL"
        )
        conn.execute(
            "SELECT setval(c.oid::regclass, 1, false) FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.relkind = 'S' AND n.nspname = 'public'"
        )
