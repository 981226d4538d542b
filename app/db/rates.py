"""SQL of rate limits: one request counted in its key's window, and the windows that ended."""

from __future__ import annotations

from datetime import datetime

from app.db.conn import Conn, one


def hit(conn: Conn, key: str, window_start: datetime) -> int:
    """Count one request of `key` in the window that starts at `window_start`; the count, this one included."""
    return int(
        one(
            conn.execute(
                """
                INSERT INTO rate_counts (key, window_start, hits) VALUES (%s, %s, 1)
                ON CONFLICT (key, window_start) DO UPDATE SET hits = rate_counts.hits + 1
                RETURNING hits
                """,
                (key, window_start),
            )
        ).hits
    )


def count_prunable(conn: Conn, ended_before: datetime) -> int:
    """Windows that started before `ended_before` (every policy's window is at most a day)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM rate_counts WHERE window_start < %s", (ended_before,))).n)


def prune(conn: Conn, ended_before: datetime, limit: int) -> int:
    """Remove up to `limit` of them; how many went."""
    return conn.execute(
        "DELETE FROM rate_counts WHERE ctid = ANY(ARRAY(SELECT ctid FROM rate_counts WHERE window_start < %s LIMIT %s))",
        (ended_before, limit),
    ).rowcount
