"""SQL of purge_failures (D7): files whose objects the store refused, their attempts and next attempt."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, one_as


@dataclass(frozen=True)
class Recorded:
    """A file recorded as refused: since when it fails, and whether it was warned of."""

    file_id: UUID
    failing_since: datetime
    warned_at: datetime | None


@dataclass(frozen=True)
class Failing:
    """How many files are failing, and since when the oldest."""

    n: int
    oldest: datetime | None


def attempts_of(conn: Conn, file_ids: Sequence[UUID]) -> dict[UUID, int]:
    """Failed attempts so far, for the files that have failed before (locked: one purge counts at a time)."""
    return {
        row.file_id: row.attempts
        for row in conn.execute(
            "SELECT file_id, attempts FROM purge_failures WHERE file_id = ANY(%s) ORDER BY file_id FOR UPDATE",
            (list(file_ids),),
        )
    }


def record(conn: Conn, failures: Sequence[tuple[UUID, int, str, datetime]], now: datetime) -> list[Recorded]:
    """Upsert (file id, attempts, store code, next attempt) of files that still exist; returns, per file,
    when it started failing (its deletion mark, else its first failure) and whether it was warned of."""
    if not failures:
        return []
    file_ids, attempts, codes, next_at = (list(column) for column in zip(*failures, strict=True))
    return all_as(
        conn,
        Recorded,
        """
        INSERT INTO purge_failures AS p (file_id, attempts, error_code, failing_since, last_attempt_at,
                                         next_attempt_at)
        SELECT c.file_id, c.attempts, c.code, coalesce(f.deleted_at, %(now)s), %(now)s, c.next_at
        FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(codes)s::text[], %(next_at)s::timestamptz[])
             AS c(file_id, attempts, code, next_at)
        JOIN files f ON f.id = c.file_id
        ON CONFLICT (file_id) DO UPDATE SET attempts = EXCLUDED.attempts, error_code = EXCLUDED.error_code,
            last_attempt_at = EXCLUDED.last_attempt_at, next_attempt_at = EXCLUDED.next_attempt_at
        RETURNING p.file_id, p.failing_since, p.warned_at
        """,
        {"ids": file_ids, "attempts": attempts, "codes": codes, "next_at": next_at, "now": now},
    )


def set_warned(conn: Conn, file_ids: Sequence[UUID], now: datetime) -> None:
    """Remember that the overdue warning of these files was logged (once per file)."""
    conn.execute("UPDATE purge_failures SET warned_at = %s WHERE file_id = ANY(%s)", (now, list(file_ids)))


def clear(conn: Conn, file_ids: Sequence[UUID]) -> None:
    """Forget the failures of files whose objects are now gone (a removed row takes its own by cascade)."""
    conn.execute("DELETE FROM purge_failures WHERE file_id = ANY(%s)", (list(file_ids),))


def failing(conn: Conn) -> Failing:
    """How many files are failing, and the oldest since when (cleanup step f)."""
    return one_as(conn, Failing, "SELECT count(*)::int AS n, min(failing_since) AS oldest FROM purge_failures")
