"""What every SQL module of app/db uses: the connection type, and statements answered as typed rows.

A connection's default rows are namedtuples, whose attributes are known only at run time; every function of
app/db answers typed rows instead (frozen dataclasses through psycopg's class_row), so no `Any` crosses the db
boundary.
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg
from psycopg.rows import class_row

# Connections use psycopg's namedtuple rows inside app/db; what leaves app/db is typed.
Conn = psycopg.Connection[Any]
T = TypeVar("T")


def one(cursor: psycopg.Cursor[Any]) -> Any:
    """The one row a statement always answers (an aggregate, a RETURNING of one insert), inside app/db."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement answered no row")
    return row


def all_as(conn: Conn, row_type: type[T], query: str, params: Any = None) -> list[T]:
    """Every row of a statement, as `row_type` (its fields named like the statement's columns)."""
    with conn.cursor(row_factory=class_row(row_type)) as cur:
        return cur.execute(query, params).fetchall()


def first_as(conn: Conn, row_type: type[T], query: str, params: Any = None) -> T | None:
    """The first row of a statement as `row_type`, or None."""
    with conn.cursor(row_factory=class_row(row_type)) as cur:
        return cur.execute(query, params).fetchone()


def one_as(conn: Conn, row_type: type[T], query: str, params: Any = None) -> T:
    """The one row a statement always answers, as `row_type`."""
    row = first_as(conn, row_type, query, params)
    if row is None:
        raise RuntimeError("the statement answered no row")
    return row
