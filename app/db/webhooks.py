"""SQL of webhook deliveries: written in the transaction of the event they report, read and updated
by the delivery job, listed by `lethe webhooks`, pruned by the cleanup."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.conn import Conn, all_as, first_as, one
from app.domain.ends import FilesSettled

COLUMNS = (
    "id, endpoint, event_type, data, occurred_at, state, attempts, last_status, last_error, next_attempt_at, "
    "created_at, finished_at"
)


@dataclass(frozen=True)
class DeliveryRow:
    """A webhook delivery: one message to one endpoint (no body but its data, the receipt's fields)."""

    id: UUID
    endpoint: str
    event_type: str
    data: dict[str, Any]
    occurred_at: datetime
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    finished_at: datetime | None


def insert(
    conn: Conn, rows: Sequence[tuple[str, str, dict[str, Any], datetime]], now: datetime
) -> list[tuple[UUID, str]]:
    """One delivery per (endpoint, event type, data, occurred_at), due now; returns (id, endpoint) in order."""
    if not rows:
        return []
    ids = [uuid.uuid4() for _ in rows]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO webhook_deliveries (id, endpoint, event_type, data, occurred_at, next_attempt_at, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [
                (delivery_id, endpoint, event_type, Jsonb(data), occurred_at, now, now)
                for delivery_id, (endpoint, event_type, data, occurred_at) in zip(ids, rows, strict=True)
            ],
        )
    return [(delivery_id, endpoint) for delivery_id, (endpoint, _, _, _) in zip(ids, rows, strict=True)]


def insert_file_purged(
    conn: Conn, endpoints: Sequence[str], file_ids: Sequence[UUID], now: datetime
) -> list[tuple[UUID, str]]:
    """A `file.purged` delivery for each endpoint and each of these files, from the receipts this transaction
    wrote (the fields of the receipt, nothing else), in one statement."""
    if not endpoints or not file_ids:
        return []
    return [
        (row.id, row.endpoint)
        for row in conn.execute(
            """
        INSERT INTO webhook_deliveries (id, endpoint, event_type, data, occurred_at, next_attempt_at, created_at)
        SELECT gen_random_uuid(), e.name, 'file.purged',
               jsonb_build_object('file_id', r.file_id, 'deleted_via', r.via, 'marked_at', r.marked_at,
                                  'purged_at', r.purged_at, 'keys_deleted', r.keys_deleted),
               r.purged_at, %(now)s, %(now)s
        FROM receipts r CROSS JOIN unnest(%(endpoints)s::text[]) AS e(name)
        WHERE r.file_id = ANY(%(ids)s)
        RETURNING id, endpoint
        """,
            {"now": now, "endpoints": list(endpoints), "ids": list(file_ids)},
        )
    ]


def insert_file_settled(
    conn: Conn, endpoints: Sequence[str], event: FilesSettled, now: datetime
) -> list[tuple[UUID, str]]:
    """A lifecycle delivery for each endpoint and each of the event's files, its data from the file's row (its id,
    purpose and size) and the event (a reason, the variants' names), in one statement."""
    return [
        (row.id, row.endpoint)
        for row in conn.execute(
            """
        INSERT INTO webhook_deliveries (id, endpoint, event_type, data, occurred_at, next_attempt_at, created_at)
        SELECT gen_random_uuid(), e.name, %(type)s,
               jsonb_build_object('file_id', f.id, 'purpose', f.purpose, 'size_bytes', f.size_bytes)
               || CASE WHEN %(reason)s::text IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object('reason', %(reason)s::text) END
               || CASE WHEN cardinality(%(variants)s::text[]) = 0 THEN '{}'::jsonb
                       ELSE jsonb_build_object('variants', to_jsonb(%(variants)s::text[])) END,
               %(at)s, %(now)s, %(now)s
        FROM files f CROSS JOIN unnest(%(endpoints)s::text[]) AS e(name)
        WHERE f.id = ANY(%(ids)s)
        RETURNING id, endpoint
        """,
            {
                "type": event.event_type,
                "reason": event.reason,
                "variants": list(event.variants),
                "at": event.at,
                "now": now,
                "endpoints": list(endpoints),
                "ids": list(event.file_ids),
            },
        )
    ]


def lease_due(conn: Conn, delivery_ids: Sequence[UUID], now: datetime, until: datetime) -> list[DeliveryRow]:
    """Take the pending deliveries among these that are due and that no attempt holds, leasing each until
    `until`: one attempt of a delivery at a time, whichever job or catch-up sends it."""
    return all_as(
        conn,
        DeliveryRow,
        f"""
        UPDATE webhook_deliveries SET leased_until = %s
        WHERE id = ANY(%s) AND state = 'pending' AND next_attempt_at <= %s
          AND (leased_until IS NULL OR leased_until <= %s)
        RETURNING {COLUMNS}
        """,
        (until, list(delivery_ids), now, now),
    )


def next_due(conn: Conn, delivery_ids: Sequence[UUID]) -> datetime | None:
    """The earliest time a pending delivery among these may be attempted again (its next attempt, or the end of
    the lease an attempt holds), or None when all ended."""
    at: datetime | None = one(
        conn.execute(
            "SELECT min(greatest(next_attempt_at, leased_until)) AS at FROM webhook_deliveries "
            "WHERE id = ANY(%s) AND state = 'pending'",
            (list(delivery_ids),),
        )
    ).at
    return at


def record(
    conn: Conn,
    delivery_id: UUID,
    state: str,
    attempts: int,
    status: int | None,
    error: str | None,
    next_attempt_at: datetime | None,
    now: datetime,
) -> None:
    """The outcome of an attempt (or of a decision not to send: a disabled or removed endpoint); its lease ends."""
    conn.execute(
        "UPDATE webhook_deliveries SET state = %s, attempts = %s, last_status = %s, last_error = %s, "
        "next_attempt_at = %s, leased_until = NULL, finished_at = CASE WHEN %s = 'pending' THEN NULL ELSE %s END "
        "WHERE id = %s",
        (state, attempts, status, error, next_attempt_at, state, now, delivery_id),
    )


def disabled(conn: Conn) -> dict[str, str]:
    """Endpoints a 410 disabled, with the fingerprint of the configuration they were disabled under."""
    return {
        row.endpoint: row.fingerprint
        for row in conn.execute("SELECT endpoint, fingerprint FROM webhook_endpoints_disabled")
    }


def disable(conn: Conn, endpoint: str, fingerprint: str, now: datetime) -> None:
    """Record a 410 of an endpoint, under the fingerprint of its configuration."""
    conn.execute(
        "INSERT INTO webhook_endpoints_disabled (endpoint, fingerprint, disabled_at) VALUES (%s, %s, %s) "
        "ON CONFLICT (endpoint) DO UPDATE SET fingerprint = excluded.fingerprint, disabled_at = excluded.disabled_at",
        (endpoint, fingerprint, now),
    )


def enable(conn: Conn, endpoint: str) -> None:
    """Forget a 410 of an endpoint whose configuration changed since."""
    conn.execute("DELETE FROM webhook_endpoints_disabled WHERE endpoint = %s", (endpoint,))


def listed(conn: Conn, failed_only: bool, limit: int) -> list[DeliveryRow]:
    """The latest deliveries, newest first (`lethe webhooks list [--failed]`)."""
    where = "WHERE state IN ('failed', 'disabled')" if failed_only else ""
    return all_as(
        conn,
        DeliveryRow,
        f"SELECT {COLUMNS} FROM webhook_deliveries {where} ORDER BY created_at DESC, id DESC LIMIT %s",
        (limit,),
    )


def delivery(conn: Conn, delivery_id: UUID) -> DeliveryRow | None:
    """One delivery, or None."""
    return first_as(conn, DeliveryRow, f"SELECT {COLUMNS} FROM webhook_deliveries WHERE id = %s", (delivery_id,))


def redeliver(conn: Conn, delivery_id: UUID, now: datetime) -> DeliveryRow | None:
    """Make a delivery pending and due now again (its id, so its webhook-id, stays); None when unknown."""
    return first_as(
        conn,
        DeliveryRow,
        f"UPDATE webhook_deliveries SET state = 'pending', next_attempt_at = %s, finished_at = NULL "
        f"WHERE id = %s RETURNING {COLUMNS}",
        (now, delivery_id),
    )


def overdue(conn: Conn, before: datetime, now: datetime, limit: int) -> list[tuple[UUID, str]]:
    """Pending deliveries due before `before` that no attempt holds now: their job was lost (index
    webhook_deliveries_due); (id, endpoint)."""
    return [
        (row.id, row.endpoint)
        for row in conn.execute(
            "SELECT id, endpoint FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at < %s "
            "AND (leased_until IS NULL OR leased_until <= %s) ORDER BY next_attempt_at, id LIMIT %s",
            (before, now, limit),
        )
    ]


def oldest_undelivered(conn: Conn) -> datetime | None:
    """When the oldest pending delivery was created (the age gauge)."""
    at: datetime | None = one(
        conn.execute("SELECT min(created_at) AS at FROM webhook_deliveries WHERE state = 'pending'")
    ).at
    return at


def prune(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` deliveries created before cutoff, oldest first (index webhook_deliveries_created)."""
    return conn.execute(
        "DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE created_at < %s "
        "ORDER BY created_at, id LIMIT %s)",
        (cutoff, limit),
    ).rowcount


def count_prunable(conn: Conn, cutoff: datetime) -> int:
    """How many deliveries were created before cutoff (the cleanup's dry run)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM webhook_deliveries WHERE created_at < %s", (cutoff,))).n)
