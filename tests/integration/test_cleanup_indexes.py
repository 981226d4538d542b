"""Every candidate query of the cleanup uses an index (D8; issue: cleanup). The benchmark repeats this on a
table of 1,000,000 rows; here 60,000 rows are enough for the planner to prefer an index when one fits."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.rows import tuple_row

from app.db import cleanup as sql
from app.db.migrate import migrate
from app.db.pool import Database
from tests.support.database import create_test_database, with_database

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def big_table(postgres_server):
    """60,000 files in a database of the module's own, made once: the queries only read it."""
    name = f"lethe_indexes_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_test_database(postgres_server, name)
    url = with_database(postgres_server, name)
    migrate(url)
    _fill(url)
    db = Database(url, pool_size=2)
    try:
        yield db
    finally:
        db.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _fill(url: str) -> None:
    """Rows made by plain statements on a connection without the pool's statement timeout (setup data, written
    once, however loaded the machine)."""
    with psycopg.connect(url, autocommit=True) as conn:
        _fill_on(conn)


def _fill_on(conn) -> None:
    conn.execute(
        """
        INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, upload_state,
                           scan_status, created_at, last_change_at, deleted_at)
        SELECT gen_random_uuid(), gen_random_uuid(), 'attachment', 'n', 'text/plain', 1, NULL,
               CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'complete' END,
               CASE WHEN i % 50 = 0 THEN 'pending' ELSE 'clean' END,
               timestamptz '2026-01-01' + i * interval '1 minute', timestamptz '2026-01-01' + i * interval '1 minute',
               CASE WHEN i % 97 = 0 THEN timestamptz '2026-05-01' ELSE NULL END
        FROM generate_series(1, 60000) AS i
        """
    )
    conn.execute(
        "INSERT INTO upload_sessions (file_id, state, part_size, part_count, created_at, expires_at, completed_at) "
        "SELECT id, 'completed', 1024, 1, created_at, created_at, created_at FROM files"
    )
    conn.execute(
        "UPDATE upload_sessions SET state = 'open', completed_at = NULL "
        "WHERE file_id IN (SELECT file_id FROM upload_sessions LIMIT 500)"
    )
    conn.execute("ANALYZE")


class ExplainCursor(psycopg.Cursor):
    """Sends each statement as EXPLAIN, and answers its rows as plain tuples (not the typed row asked for)."""

    def __init__(self, connection, *, row_factory=None):
        super().__init__(connection, row_factory=tuple_row)

    def execute(self, query, params=None, **kwargs):
        return super().execute("EXPLAIN (FORMAT JSON) " + query, params, **kwargs)


def plan(db, query) -> str:
    """The plan of the one statement `query` runs."""

    def explain(conn):
        original_execute, original_factory = conn.execute, conn.cursor_factory

        def capture(statement, params=None, **kwargs):
            return original_execute("EXPLAIN (FORMAT JSON) " + statement, params, **kwargs)

        conn.execute, conn.cursor_factory = capture, ExplainCursor
        try:
            rows = query(conn)
        finally:
            conn.execute, conn.cursor_factory = original_execute, original_factory
        return json.dumps(rows[0][0])

    return db.read(explain)


@pytest.mark.parametrize(
    "name, query",
    [
        ("a", lambda conn: sql.expired_sessions(conn, NOW, None, 500)),
        ("a+cursor", lambda conn: sql.expired_sessions(conn, NOW, (NOW, uuid.UUID(int=0)), 500)),
        ("b", lambda conn: sql.unattached_candidates(conn, NOW, None, 500)),
        (
            "b+cursor",
            lambda conn: sql.unattached_candidates(conn, NOW, (NOW, uuid.UUID(int=0)), 500),
        ),
        ("c", lambda conn: sql.failed_candidates(conn, NOW, None, 500)),
        ("d", lambda conn: sql.deleted_rows(conn, NOW, None, 500)),
        ("d+cursor", lambda conn: sql.deleted_rows(conn, NOW, (NOW, uuid.UUID(int=0)), 500)),
        ("d refused", lambda conn: sql.due_refused_live(conn, NOW, None, 500)),
        ("f", lambda conn: [sql.backlog(conn)]),
    ],
)
def test_candidate_queries_use_an_index(big_table, name, query):
    text = plan(big_table, query)
    scans = list(nodes(json.loads(text)[0]["Plan"]))
    sequential = [n["Relation Name"] for n in scans if n["Node Type"] == "Seq Scan"]
    assert not {"files", "upload_sessions"} & set(sequential), f"step {name} scans a table: {text}"
    assert any("Index" in n["Node Type"] for n in scans)


def nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)
