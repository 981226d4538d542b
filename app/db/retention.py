"""SQL of retention (D16): candidates by (time, id) through the partial indexes of migration 0005, the
retirement and restore of files, and the last real run of each scheduled job (schedule_runs)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as
from app.db.keyset import Candidate, Cursor, after
from app.domain.retention import RetentionFacts


def retire_candidates(
    conn: Conn, purpose: str, cutoff: datetime, include_attached: bool, cursor: Cursor, limit: int
) -> list[Candidate]:
    """Settled, live, not retired files of a purpose last changed at or before cutoff (index
    files_retention_candidates); unless the policy includes attached files, attached and slot-kept ones are
    left out here, so a run never pages or locks the files it must keep (as step b does)."""
    extra, params = after(cursor, "last_change_at")
    in_use = (
        ""
        if include_attached
        else """
          AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id)
          AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.file_id = f.id)"""
    )
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files f
        WHERE purpose = %s AND deleted_at IS NULL AND retired_at IS NULL AND upload_state <> 'uploading'
          AND last_change_at <= %s{extra}{in_use}
        ORDER BY last_change_at, id LIMIT %s
        """,
        (purpose, cutoff, *params, limit),
    )


def retired_candidates(conn: Conn, purpose: str, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Retired, not deleted files of a purpose retired at or before cutoff (index files_retired)."""
    extra, params = after(cursor, "retired_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, retired_at AS at FROM files
        WHERE purpose = %s AND retired_at IS NOT NULL AND deleted_at IS NULL AND retired_at <= %s{extra}
        ORDER BY retired_at, id LIMIT %s
        """,
        (purpose, cutoff, *params, limit),
    )


def retention_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[RetentionFacts]:
    """What the pure rules decide on, read after the lock (a fresh statement sees committed attaches). A file
    in a slot counts as attached: it is in use, and only its slot releases it."""
    return all_as(
        conn,
        RetentionFacts,
        """
        SELECT f.id, f.purpose, f.upload_state, f.deleted_at IS NOT NULL AS deleted, f.retired_at,
               f.last_change_at,
               EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id)
               OR EXISTS (SELECT 1 FROM slots s WHERE s.file_id = f.id) AS attached
        FROM files f WHERE f.id = ANY(%s) ORDER BY f.id
        """,
        (list(file_ids),),
    )


def set_retired(conn: Conn, file_ids: Sequence[UUID], now: datetime) -> int:
    """Retire live, not yet retired files now; returns how many."""
    return conn.execute(
        "UPDATE files SET retired_at = %s WHERE id = ANY(%s) AND retired_at IS NULL AND deleted_at IS NULL",
        (now, list(file_ids)),
    ).rowcount


def restore(conn: Conn, file_id: UUID, now: datetime) -> None:
    """Bring a retired file back; its age starts again from now (last_change_at)."""
    conn.execute(
        "UPDATE files SET retired_at = NULL, last_change_at = GREATEST(last_change_at, %s) WHERE id = %s",
        (now, file_id),
    )


def record_run(conn: Conn, name: str, now: datetime) -> None:
    """Record a finished run of a scheduled job (the cadence gate reads it). The caller holds
    the job's exclusive lock (app/db/locks.py), so the gate is checked and the run recorded by one runner."""
    conn.execute(
        """
        INSERT INTO schedule_runs (name, last_run_at) VALUES (%s, %s)
        ON CONFLICT (name) DO UPDATE SET last_run_at = greatest(schedule_runs.last_run_at, EXCLUDED.last_run_at)
        """,
        (name, now),
    )


def last_run(conn: Conn, name: str) -> datetime | None:
    """When a scheduled job last finished a run, or None."""
    row = conn.execute("SELECT last_run_at FROM schedule_runs WHERE name = %s", (name,)).fetchone()
    return row.last_run_at if row is not None else None
