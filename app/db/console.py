"""SQL of the operator console: its sign-in links and sessions (only SHA-256 digests of their tokens are kept),
the last cleanup run's counts per step, and the counts and lists its pages show. Ids, counts and times only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one, one_as
from app.db.erasures import COLUMNS as ERASURE_COLUMNS
from app.db.erasures import ErasureRow
from app.db.holds import OF_HOLD
from app.db.receipts import COLUMNS as RECEIPT_COLUMNS
from app.db.receipts import ReceiptRow


@dataclass(frozen=True)
class Session:
    """A console session: whose, its forms' token, until when."""

    principal_id: UUID
    csrf: str
    expires_at: datetime


@dataclass(frozen=True)
class StepRun:
    """What the last cleanup run that was not a dry run found and did in one step."""

    step: str
    name: str
    ran_at: datetime
    candidates: int
    acted: int
    kept: int
    failed: int
    error: str | None
    duration_s: float


@dataclass(frozen=True)
class Pending:
    """Work that waits on a worker: scans and variants of complete files, and the oldest of each."""

    scans: int
    oldest_scan: datetime | None
    variants: int
    oldest_variants: datetime | None
    deliveries_failing: int
    deliveries_pending: int
    oldest_delivery: datetime | None
    erasures_running: int


@dataclass(frozen=True)
class HeldFile:
    """A file a hold covers: its id, whether it was deleted, and since when."""

    id: UUID
    deleted_at: datetime | None


def grant(conn: Conn, token_sha256: bytes, principal_id: UUID, now: datetime, expires_at: datetime) -> None:
    """Record a sign-in link, and forget the links and sessions that expired."""
    prune(conn, now)
    conn.execute(
        "INSERT INTO console_grants (token_sha256, principal_id, created_at, expires_at) VALUES (%s, %s, %s, %s)",
        (token_sha256, principal_id, now, expires_at),
    )


def grant_valid(conn: Conn, token_sha256: bytes, now: datetime) -> bool:
    """Whether a sign-in link is unused and unexpired (read only: the page before the sign-in)."""
    return (
        conn.execute(
            "SELECT 1 FROM console_grants WHERE token_sha256 = %s AND expires_at > %s", (token_sha256, now)
        ).fetchone()
        is not None
    )


def use_grant(conn: Conn, token_sha256: bytes, now: datetime) -> UUID | None:
    """Use a sign-in link up: its principal, or None when it is unknown, used or expired. The row goes, so a
    second use finds nothing."""
    row = conn.execute(
        "DELETE FROM console_grants WHERE token_sha256 = %s RETURNING principal_id, expires_at > %s AS valid",
        (token_sha256, now),
    ).fetchone()
    return row.principal_id if row is not None and row.valid else None


def open_session(
    conn: Conn, token_sha256: bytes, principal_id: UUID, csrf: str, now: datetime, expires_at: datetime
) -> None:
    """Record a session, and forget the links and sessions that expired."""
    prune(conn, now)
    conn.execute(
        "INSERT INTO console_sessions (token_sha256, principal_id, csrf, created_at, expires_at) "
        "VALUES (%s, %s, %s, %s, %s)",
        (token_sha256, principal_id, csrf, now, expires_at),
    )


def session(conn: Conn, token_sha256: bytes, now: datetime) -> Session | None:
    """The session of a cookie's digest, unless unknown or expired."""
    return first_as(
        conn,
        Session,
        "SELECT principal_id, csrf, expires_at FROM console_sessions WHERE token_sha256 = %s AND expires_at > %s",
        (token_sha256, now),
    )


def close_session(conn: Conn, token_sha256: bytes) -> None:
    """Sign out: the session goes."""
    conn.execute("DELETE FROM console_sessions WHERE token_sha256 = %s", (token_sha256,))


def prune(conn: Conn, now: datetime) -> None:
    """Forget expired links and sessions."""
    conn.execute("DELETE FROM console_grants WHERE expires_at <= %s", (now,))
    conn.execute("DELETE FROM console_sessions WHERE expires_at <= %s", (now,))


def record_steps(conn: Conn, ran_at: datetime, steps: Sequence[StepRun]) -> None:
    """Keep what a cleanup run found and did in each step (one row a step, replaced)."""
    with conn.cursor() as cur:
        cur.executemany(
            """
            INSERT INTO cleanup_steps (step, name, ran_at, candidates, acted, kept, failed, error, duration_s)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (step) DO UPDATE SET name = excluded.name, ran_at = excluded.ran_at,
                candidates = excluded.candidates, acted = excluded.acted, kept = excluded.kept,
                failed = excluded.failed, error = excluded.error, duration_s = excluded.duration_s
            """,
            [(s.step, s.name, ran_at, s.candidates, s.acted, s.kept, s.failed, s.error, s.duration_s) for s in steps],
        )


def last_steps(conn: Conn) -> list[StepRun]:
    """The last run's counts, by step."""
    return all_as(conn, StepRun, "SELECT * FROM cleanup_steps ORDER BY step")


def pending(conn: Conn) -> Pending:
    """Scans and variants pending, webhook deliveries failing and pending, erasures running."""
    return one_as(
        conn,
        Pending,
        """
        SELECT s.n AS scans, s.oldest AS oldest_scan, v.n AS variants, v.oldest AS oldest_variants,
               w.failing AS deliveries_failing, w.pending AS deliveries_pending, w.oldest AS oldest_delivery,
               (SELECT count(*) FROM erasures WHERE state = 'running')::int AS erasures_running
        FROM (SELECT count(*)::int AS n, min(last_change_at) AS oldest FROM files
              WHERE deleted_at IS NULL AND upload_state = 'complete' AND scan_status = 'pending') s,
             (SELECT count(*)::int AS n, min(variants_since) AS oldest FROM files
              WHERE variants_state = 'pending') v,
             (SELECT count(*) FILTER (WHERE state IN ('failed', 'disabled'))::int AS failing,
                     count(*) FILTER (WHERE state = 'pending')::int AS pending,
                     min(created_at) FILTER (WHERE state = 'pending') AS oldest
              FROM webhook_deliveries) w
        """,
    )


def held_files(conn: Conn, hold_id: UUID, limit: int) -> list[HeldFile]:
    """The files a hold covers, deleted ones first, then by id."""
    return all_as(
        conn,
        HeldFile,
        f"""
        SELECT f.id, f.deleted_at FROM legal_holds h JOIN files f ON {OF_HOLD}
        WHERE h.id = %s ORDER BY f.deleted_at IS NULL, f.deleted_at, f.id LIMIT %s
        """,
        (hold_id, limit),
    )


def erasures(conn: Conn, limit: int) -> list[ErasureRow]:
    """The latest erasures, newest first."""
    return all_as(
        conn,
        ErasureRow,
        f"SELECT {ERASURE_COLUMNS} FROM erasures ORDER BY created_at DESC, id LIMIT %s",
        (limit,),
    )


def receipts(conn: Conn, limit: int) -> list[ReceiptRow]:
    """The latest receipts, newest first."""
    return all_as(
        conn,
        ReceiptRow,
        f"SELECT {RECEIPT_COLUMNS} FROM receipts ORDER BY purged_at DESC, file_id LIMIT %s",
        (limit,),
    )


@dataclass(frozen=True)
class Usage:
    """What principals hold, summed (the quotas' counters), and how many have limits of their own."""

    principals: int
    used_files: int
    used_bytes: int
    reserved_files: int
    reserved_bytes: int
    with_quota: int


def usage(conn: Conn) -> Usage:
    """The quotas' counters, summed over every principal (their rows for every purpose, `*`)."""
    return one_as(
        conn,
        Usage,
        """
        SELECT count(DISTINCT principal_id) FILTER (WHERE used_files > 0 OR reserved_files > 0)::int AS principals,
               coalesce(sum(used_files), 0)::bigint AS used_files, coalesce(sum(used_bytes), 0)::bigint AS used_bytes,
               coalesce(sum(reserved_files), 0)::bigint AS reserved_files,
               coalesce(sum(reserved_bytes), 0)::bigint AS reserved_bytes,
               (SELECT count(*) FROM quotas)::int AS with_quota
        FROM principal_usage WHERE purpose = '*'
        """,
    )


def journal_waiting(conn: Conn) -> int:
    """Journal entries committed and not yet written to the store."""
    return int(one(conn.execute("SELECT count(*) AS n FROM journal_pending")).n)
