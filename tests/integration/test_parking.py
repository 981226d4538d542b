"""The suite's parked sessions (tests/support/parking.py): a test's pool hands its idle sessions on to the next
test's, reset as a new session would be; one whose server process ended is replaced, not handed on."""

from __future__ import annotations

import time

import psycopg
import pytest

from app.db.conn import one
from app.db.pool import Database, Timeouts
from tests.support import parking


@pytest.fixture
def parked(database_url):
    if not parking.installed():
        pytest.skip("LETHE_TEST_PARKING=0 turned the parking off for this run")
    return database_url


def _close(db: Database) -> None:
    """Close db once its pool has taken its connection back (a worker of the pool does that after the block)."""
    deadline = time.monotonic() + 10
    while db.pool.get_stats().get("pool_available") != 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    db.close()


def _session(db: Database) -> tuple[int, str, int, int]:
    """The server process of one of db's connections, and what a session may leave behind on it."""
    with db.pool.connection() as conn:
        pid = one(conn.execute("SELECT pg_backend_pid() AS pid")).pid
        zone = one(conn.execute("SHOW TimeZone")).TimeZone
        locks = one(
            conn.execute("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        ).n
        temps = one(conn.execute("SELECT count(*) AS n FROM pg_class WHERE relname = 'parked_scratch'")).n
        return pid, zone, locks, temps


def test_a_closed_pools_session_serves_the_next_pool_as_a_new_one_would(parked):
    first = Database(parked, pool_size=1)
    with first.pool.connection() as conn:
        pid = one(conn.execute("SELECT pg_backend_pid() AS pid")).pid
        zone = one(conn.execute("SHOW TimeZone")).TimeZone
        conn.execute("SET TimeZone = 'Pacific/Chatham'")
        conn.execute("SELECT pg_advisory_lock(4242)")
        conn.execute("CREATE TEMPORARY TABLE parked_scratch (n int)")
    _close(first)
    assert pid in parking.parked_pids()
    second = Database(parked, pool_size=1)
    try:
        assert _session(second) == (pid, zone, 0, 0)  # the same server process, nothing of the last session
    finally:
        second.close()


def test_a_session_whose_server_process_ended_is_replaced(parked):
    first = Database(parked, pool_size=1)
    with first.pool.connection() as conn:
        pid = one(conn.execute("SELECT pg_backend_pid() AS pid")).pid
    _close(first)
    assert pid in parking.parked_pids()
    with psycopg.connect(parked, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    second = Database(parked, pool_size=1)
    try:
        assert _session(second)[0] != pid
    finally:
        second.close()


def test_no_more_sessions_are_parked_than_the_server_can_spare(parked):
    """At most KEEP of one set of connection arguments (statement timeouts differ: sessions of their own), TOTAL
    in all; the rest are closed, as without the parking."""
    pools = [
        Database(parked, pool_size=1, timeouts=Timeouts(statement=statement))
        for statement in (3.0, 4.0)
        for _ in range(parking.KEEP + 2)
    ]
    for db in pools:
        with db.pool.connection() as conn:
            conn.execute("SELECT 1")
    for db in pools:
        _close(db)
    assert parking.parked_count() == parking.TOTAL < 2 * parking.KEEP
