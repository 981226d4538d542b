"""The schema (D3), the unit of work and its retries (D10), on the real PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors

from app.db.conn import one
from app.db.context import in_transaction
from app.db.migrate import migrate
from app.db.pool import Database

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def insert_file(conn, file_id=None, **overrides):
    values = dict(
        id=file_id or uuid.uuid4(),
        uploaded_by=uuid.uuid4(),
        purpose="attachment",
        original_name="report.pdf",
        mime_type="application/pdf",
        size_bytes=10,
        created_at=NOW,
        last_change_at=NOW,
    )
    values.update(overrides)
    columns = ", ".join(values)
    placeholders = ", ".join(f"%({name})s" for name in values)
    conn.execute(f"INSERT INTO files ({columns}) VALUES ({placeholders})", values)
    return values["id"]


def insert_session(conn, file_id, state="open"):
    conn.execute(
        "INSERT INTO upload_sessions (file_id, state, part_size, part_count, created_at, expires_at) "
        "VALUES (%s, %s, 8388608, 2, %s, %s)",
        (file_id, state, NOW, NOW + timedelta(days=1)),
    )


def test_migrate_is_idempotent(database_url):
    assert migrate(database_url) == 0


def test_every_table_of_d3_exists(db):
    names = db.read(
        lambda conn: {
            row.table_name
            for row in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        }
    )
    assert {
        "files",
        "upload_sessions",
        "upload_parts",
        "messages",
        "attachments",
        "drafts",
        "events",
        "outbox",
    } <= names


@pytest.mark.parametrize(
    "column, value",
    [
        ("purpose", "banner"),
        ("upload_state", "done"),
        ("scan_status", "maybe"),
        ("sha256", "ABC"),
        ("size_bytes", -1),
    ],
)
def test_state_columns_are_checked(db, column, value):
    with pytest.raises(pg_errors.CheckViolation):
        db.unit_of_work(lambda uow: insert_file(uow.conn, **{column: value}), name="test")


def test_session_state_is_checked(db):
    def work(uow):
        file_id = insert_file(uow.conn)
        insert_session(uow.conn, file_id, state="paused")

    with pytest.raises(pg_errors.CheckViolation):
        db.unit_of_work(work, name="test")


def test_deleting_a_file_cascades_to_its_session_and_parts(db):
    def setup(uow):
        file_id = insert_file(uow.conn)
        insert_session(uow.conn, file_id)
        uow.execute(
            "INSERT INTO upload_parts (file_id, part_number, size_bytes, etag, received_at) VALUES (%s, 1, 5, 'e', %s)",
            (file_id, NOW),
        )
        return file_id

    file_id = db.unit_of_work(setup, name="test")
    db.unit_of_work(lambda uow: uow.execute("DELETE FROM files WHERE id = %s", (file_id,)), name="test")
    counts = db.read(
        lambda conn: conn.execute(
            "SELECT (SELECT count(*) FROM upload_sessions) AS s, (SELECT count(*) FROM upload_parts) AS p"
        ).fetchone()
    )
    assert (counts.s, counts.p) == (0, 0)


AUTHOR = uuid.uuid4()


def test_an_attachment_restricts_the_file_and_a_file_is_attached_once(db):
    def setup(uow):
        file_id = insert_file(uow.conn)
        for message_id in ("m1", "m2"):
            uow.execute(
                "INSERT INTO messages (id, author_id, created_at) VALUES (%s, %s, %s)", (message_id, AUTHOR, NOW)
            )
        uow.execute(
            "INSERT INTO attachments (author_id, message_id, file_id, attached_at) VALUES (%s, 'm1', %s, %s)",
            (AUTHOR, file_id, NOW),
        )
        return file_id

    file_id = db.unit_of_work(setup, name="test")
    # PostgreSQL 15 reports a foreign key violation, newer servers a restrict violation.
    with pytest.raises((pg_errors.ForeignKeyViolation, pg_errors.RestrictViolation)):
        db.unit_of_work(lambda uow: uow.execute("DELETE FROM files WHERE id = %s", (file_id,)), name="test")
    with pytest.raises(pg_errors.UniqueViolation):
        db.unit_of_work(
            lambda uow: uow.execute(
                "INSERT INTO attachments (author_id, message_id, file_id, attached_at) VALUES (%s, 'm2', %s, %s)",
                (AUTHOR, file_id, NOW),
            ),
            name="test",
        )


def test_unit_of_work_commits_and_sets_the_transaction_flag(db):
    seen = []

    def work(uow):
        seen.append(in_transaction())
        return insert_file(uow.conn)

    file_id = db.unit_of_work(work, name="test")
    assert seen == [True] and in_transaction() is False
    assert db.read(lambda conn: conn.execute("SELECT id FROM files WHERE id = %s", (file_id,)).fetchone())


def test_unit_of_work_rolls_back_on_error(db):
    file_id = uuid.uuid4()

    def work(uow):
        insert_file(uow.conn, file_id)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        db.unit_of_work(work, name="test")
    assert db.read(lambda conn: conn.execute("SELECT id FROM files WHERE id = %s", (file_id,)).fetchone()) is None
    assert in_transaction() is False


def test_a_nested_unit_of_work_is_refused(db):
    with pytest.raises(RuntimeError):
        db.unit_of_work(lambda uow: db.unit_of_work(lambda inner: None, name="inner"), name="outer")


def _provoke_deadlock(db: Database, file_a, file_b):
    """Two transactions lock two rows in opposite orders; PostgreSQL kills one of them with a deadlock."""
    barrier = threading.Barrier(2, timeout=10)
    attempts = {"ab": 0, "ba": 0}
    errors = []

    def worker(name, first, second):
        def work(uow):
            attempts[name] += 1
            uow.execute("SELECT id FROM files WHERE id = %s FOR UPDATE", (first,))
            if attempts[name] == 1:
                barrier.wait()  # both hold their first lock: the second lock deadlocks
            uow.execute("SELECT id FROM files WHERE id = %s FOR UPDATE", (second,))
            uow.execute("UPDATE files SET size_bytes = size_bytes + 1 WHERE id = %s", (second,))

        try:
            db.unit_of_work(work, name=f"test.deadlock.{name}")
        except Exception as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=("ab", file_a, file_b)),
        threading.Thread(target=worker, args=("ba", file_b, file_a)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return attempts, errors


def test_a_real_deadlock_is_retried_until_both_commit(db):
    file_a, file_b = db.unit_of_work(lambda uow: (insert_file(uow.conn), insert_file(uow.conn)), name="test")
    attempts, errors = _provoke_deadlock(db, file_a, file_b)
    assert errors == []
    assert sorted(attempts.values()) == [1, 2]  # one side was chosen as the victim and ran again
    sizes = db.read(lambda conn: [row.size_bytes for row in conn.execute("SELECT size_bytes FROM files")])
    assert sorted(sizes) == [11, 11]


def test_a_deadlock_past_the_retry_limit_is_raised(database_url, db):
    no_retry = Database(database_url, pool_size=4, tx_retry_max=0)
    try:
        file_a, file_b = no_retry.unit_of_work(lambda uow: (insert_file(uow.conn), insert_file(uow.conn)), name="test")
        attempts, errors = _provoke_deadlock(no_retry, file_a, file_b)
    finally:
        no_retry.close()
    assert len(errors) == 1 and isinstance(errors[0], pg_errors.DeadlockDetected)
    assert sorted(attempts.values()) == [1, 1]


def test_read_runs_without_a_transaction(db):
    status = db.read(lambda conn: conn.info.transaction_status)
    assert status == psycopg.pq.TransactionStatus.IDLE


def test_every_unit_of_work_is_timed_by_its_name(db):
    from app.platform.observability import metrics

    def count(name: str) -> float:
        return sum(
            sample.value
            for metric in metrics.DB_UNIT_SECONDS.collect()
            for sample in metric.samples
            if sample.name.endswith("_count") and sample.labels.get("name") == name
        )

    before = count("test.timed")
    db.unit_of_work(lambda uow: uow.execute("SELECT 1"), name="test.timed")
    with pytest.raises(ZeroDivisionError):
        db.unit_of_work(lambda uow: 1 / 0, name="test.timed")  # a failed one is timed too
    assert count("test.timed") == before + 2


def test_maintenance_work_has_its_own_statement_timeout_and_requests_keep_theirs(database_url):
    """database.maintenance_statement_timeout (issue 24): a statement longer than a request may take is
    cancelled on the request path and runs to its end as maintenance work, in a unit of work and a read."""
    from app.db.pool import Database, Timeouts

    db = Database(database_url, pool_size=2, timeouts=Timeouts(statement=0.2, maintenance=5.0))
    slow = "SELECT pg_sleep(0.6) IS NULL AS slept"
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.read(lambda conn: conn.execute(slow).fetchone())
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.unit_of_work(lambda uow: uow.execute(slow).fetchone(), name="test.request")
        with db.maintenance():
            assert db.read(lambda conn: one(conn.execute(slow))).slept is False
            assert db.unit_of_work(lambda uow: one(uow.execute(slow)), name="test.maintenance").slept is False
        # and the block's end gives the request timeout back
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.read(lambda conn: conn.execute(slow).fetchone())
    finally:
        db.close()


def test_the_rollback_of_per_file_keys_is_refused_while_a_file_is_sealed(database_url):
    import sqlparse

    from app.db.migrate import MIGRATIONS

    statements = sqlparse.split((MIGRATIONS / "0021.file_keys.rollback.sql").read_text())
    with psycopg.connect(database_url) as conn:  # one transaction, rolled back: the schema stays
        insert_file(conn, encrypted=True, key_id="k1", wrapped_key=b"w" * 61, piece_size=1024)
        with pytest.raises(pg_errors.RaiseException, match="sealed under per-file keys"):
            for statement in statements:
                conn.execute(statement)
        conn.rollback()
        conn.execute("DELETE FROM files WHERE encrypted")
        for statement in statements:
            conn.execute(statement)
        assert (
            one(
                conn.execute(
                    "SELECT count(*) FROM information_schema.columns WHERE table_name = 'files' "
                    "AND column_name = 'wrapped_key'"
                )
            )[0]
            == 0
        )
        conn.rollback()


def test_the_suites_throwaway_database_commits_without_waiting_for_the_disk(database_url):
    """tests/support/database.py: the session's database alone; the server's own setting is untouched."""
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
        server = conn.execute("SELECT boot_val FROM pg_settings WHERE name = 'synchronous_commit'").fetchone()
        assert server == ("on",)
