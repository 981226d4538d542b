"""What every SQL module of app/db uses: the connection type and the one-row helper."""

from __future__ import annotations

from typing import Any

import psycopg

# Connections use psycopg's namedtuple rows, whose attributes are known only at run time: a row is Any.
Conn = psycopg.Connection[Any]


def one(cursor: psycopg.Cursor[Any]) -> Any:
    """The one row a statement always answers (an aggregate, a RETURNING of one insert)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement answered no row")
    return row
