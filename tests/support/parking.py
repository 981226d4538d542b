"""Server sessions of the suite's database kept warm from one test's pools to the next.

Some eleven hundred tests build a Lethe (or a Database) of their own, and each pool opened new server processes
whose caches (catalog, plans, the triggers' functions) were all cold: about 29 ms of PostgreSQL's CPU per test
beyond the work itself. Here a pool that closes an idle connection to the session's database hands it to a
parking place instead, and a pool that opens one takes it back from there after a reset (`RESET` below): every
open cursor, setting, listen, advisory lock and temporary table of the session is gone, as for a new connection,
and the server process keeps its caches. A connection that fails the reset (its server process was ended) is
closed and a new one made.

Only connections to the session's own database, made with the same arguments, and only ones idle and whole:
anything else is closed as before. Roles and commands run in processes of their own and are untouched, and so
is every other database (an upgrade test's template must have no session on it)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from app.db.pool import BoundedConnection

KEEP = 8  # parked sessions at most per set of connection arguments: a pool's size in the tests
TOTAL = 12  # and in all, per test process: three workers' parked sessions stay far under max_connections (100)
# What a new session would not have: cursors, settings, listens, advisory locks, temporary tables, sequences' state.
# Not the prepared statements (DISCARD ALL would drop them): psycopg keeps its own list of them per connection, and
# both stay as they are.
RESET = "CLOSE ALL; RESET ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES"

_lock = threading.Lock()
_parked: dict[tuple[str, tuple[tuple[str, str], ...]], list[BoundedConnection]] = {}
_url: str | None = None
_original_connect = BoundedConnection.connect.__func__  # type: ignore[attr-defined]
_own_connect = "connect" in BoundedConnection.__dict__
_original_close = ConnectionPool._close_connection


def _key(conninfo: str, kwargs: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return conninfo, tuple(sorted((name, repr(value)) for name, value in kwargs.items() if name != "connect_timeout"))


def _connect(cls: type[BoundedConnection], conninfo: str = "", **kwargs: Any) -> BoundedConnection:
    if conninfo == _url and cls is BoundedConnection:
        key = _key(conninfo, kwargs)
        while True:
            with _lock:
                waiting = _parked.get(key)
                conn = waiting.pop() if waiting else None
            if conn is None:
                break
            try:
                conn.execute(RESET)
            except psycopg.Error:
                conn.close()
                continue
            conn._parking_key = key  # type: ignore[attr-defined]
            return conn
        conn = _original_connect(cls, conninfo, **kwargs)
        conn._parking_key = key
        return conn
    return _original_connect(cls, conninfo, **kwargs)


def _close_connection(pool: ConnectionPool[Any], conn: Any) -> None:
    key = getattr(conn, "_parking_key", None)
    if key is not None and not conn.closed and not conn.broken:
        if conn.pgconn.transaction_status == TransactionStatus.IDLE:
            conn._pool = None
            conn.answer_timeout = None
            with _lock:
                waiting = _parked.setdefault(key, [])
                if any(parked is conn for parked in waiting):
                    return  # closed twice by its pool: parked once
                if len(waiting) < KEEP and sum(len(each) for each in _parked.values()) < TOTAL:
                    waiting.append(conn)
                    return
    _original_close(pool, conn)


def install(url: str) -> None:
    """Park the idle sessions of the database of `url` (the test session's) from now on."""
    global _url
    _url = url
    BoundedConnection.connect = classmethod(_connect)  # type: ignore[assignment, method-assign, arg-type]
    ConnectionPool._close_connection = _close_connection  # type: ignore[assignment, method-assign]


def uninstall() -> None:
    """Close every parked session and open connections as before (before the database is dropped)."""
    global _url
    _url = None
    if _own_connect:
        BoundedConnection.connect = classmethod(_original_connect)  # type: ignore[assignment, method-assign]
    elif "connect" in BoundedConnection.__dict__:
        del BoundedConnection.connect
    ConnectionPool._close_connection = _original_close  # type: ignore[method-assign]
    with _lock:
        parked = [conn for waiting in _parked.values() for conn in waiting]
        _parked.clear()
    for conn in parked:
        conn.close()


def parked_count() -> int:
    with _lock:
        return sum(len(waiting) for waiting in _parked.values())


def installed() -> bool:
    with _lock:
        return _url is not None


def parked_pids() -> set[int]:
    """The server processes of the sessions parked now."""
    with _lock:
        return {conn.info.backend_pid for waiting in _parked.values() for conn in waiting}
