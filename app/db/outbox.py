"""SQL of the outbox (D9)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from app.db.conn import Conn, all_as, one


def insert_job(
    conn: Conn,
    queue_name: str,
    actor_name: str,
    args: Sequence[Any],
    created_at: datetime,
    traceparent: str | None = None,
) -> int:
    """Write a job in the caller's transaction (D9), with the trace it continues; returns its outbox id."""
    return int(
        one(
            conn.execute(
                "INSERT INTO outbox (queue_name, actor_name, args, created_at, traceparent) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                (queue_name, actor_name, Jsonb(list(args)), created_at, traceparent),
            )
        ).id
    )


def delete_published(conn: Conn, outbox_ids: Sequence[int]) -> int:
    """Delete rows whose jobs were published; returns how many were still there."""
    return conn.execute("DELETE FROM outbox WHERE id = ANY(%s)", (list(outbox_ids),)).rowcount


@dataclass(frozen=True)
class OutboxRow:
    """A job left in the outbox."""

    id: int
    queue_name: str
    actor_name: str
    args: list[Any]
    traceparent: str | None = None


def claim_left_behind(conn: Conn, created_before: datetime, limit: int) -> list[OutboxRow]:
    """Rows written before the cutoff (the project's clock minus the relay age), locked so that a second
    relay skips them (FOR UPDATE SKIP LOCKED)."""
    return all_as(
        conn,
        OutboxRow,
        """
        SELECT id, queue_name, actor_name, args, traceparent
        FROM outbox
        WHERE created_at <= %s
        ORDER BY created_at, id
        LIMIT %s
        FOR UPDATE SKIP LOCKED
        """,
        (created_before, limit),
    )


def outbox_depth(conn: Conn) -> int:
    """How many jobs wait in the outbox (the gauge lethe_outbox_depth)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM outbox")).n)
