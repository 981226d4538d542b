"""SQL of the cleanup (D8). Each candidate query reads by (time, id) through a partial index of the
0001 migration; tests/integration/test_cleanup_indexes.py checks the plans."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, one, one_as
from app.db.keeps import held
from app.db.keyset import Candidate, Cursor, after
from app.domain.ages import CleanupFacts

CLEANUP_LOCK_KEY = 0x6C65746865_01  # "lethe" + 1: one cleanup run at a time in the cluster (db/locks.py)
SCHEDULER_LOCK_KEY = 0x6C65746865_02  # the scheduler's leader lock


def try_lock(conn: Conn, key: int) -> bool:
    """A session-level advisory lock, held until unlock() or the connection ends (the scheduler's leader lock:
    it must end with a silent session; every other run is exclusive through db/locks.py)."""
    return bool(one(conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (key,))).locked)


def unlock(conn: Conn, key: int) -> None:
    """Release a session-level advisory lock taken with try_lock()."""
    conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def expired_sessions(conn: Conn, now: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step a: open sessions with expires_at <= now (index upload_sessions_open_expiry)."""
    extra, params = after(cursor, "expires_at", "file_id")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT file_id AS id, expires_at AS at FROM upload_sessions
        WHERE state = 'open' AND expires_at <= %s{extra}
        ORDER BY expires_at, file_id LIMIT %s
        """,
        (now, *params, limit),
    )


def unattached_candidates(conn: Conn, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step b: deliverable attachments, not deleted, not attached, last changed at or before cutoff
    (index files_unattached_candidates)."""
    extra, params = after(cursor, "last_change_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files f
        WHERE purpose = 'attachment' AND deleted_at IS NULL AND upload_state = 'complete'
          AND scan_status IN ('clean', 'skipped') AND last_change_at <= %s{extra}
          AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id)
        ORDER BY last_change_at, id LIMIT %s
        """,
        (cutoff, *params, limit),
    )


def failed_candidates(conn: Conn, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step c: failed or blocked attachments, not deleted, not attached, last changed at or before cutoff
    (index files_failed_candidates)."""
    extra, params = after(cursor, "last_change_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files f
        WHERE purpose = 'attachment' AND deleted_at IS NULL
          AND (upload_state = 'failed' OR (upload_state = 'complete' AND scan_status IN ('infected', 'error')))
          AND last_change_at <= %s{extra}
          AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id)
        ORDER BY last_change_at, id LIMIT %s
        """,
        (cutoff, *params, limit),
    )


def deleted_rows(conn: Conn, now: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step d: deleted rows, oldest mark first (index files_deleted), but for those the store refused
    whose next attempt is not due yet: a poisoned file never holds back the others (D7), and those a legal
    hold covers (the release enqueues their purge)."""
    extra, params = after(cursor, "deleted_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, deleted_at AS at FROM files f WHERE deleted_at IS NOT NULL{extra}
          AND NOT EXISTS (SELECT 1 FROM purge_failures p WHERE p.file_id = f.id AND p.next_attempt_at > %s)
          AND NOT {held("f")}
        ORDER BY deleted_at, id LIMIT %s
        """,
        (*params, now, limit),
    )


def due_refused_live(conn: Conn, now: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step d, second part: files not deleted (failed or blocked, objects only) whose objects the store
    refused and whose next attempt is due (index purge_failures_due)."""
    extra, params = ("", ()) if cursor is None else (" AND (p.next_attempt_at, p.file_id) > (%s, %s)", cursor)
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT p.file_id AS id, p.next_attempt_at AS at FROM purge_failures p JOIN files f ON f.id = p.file_id
        WHERE p.next_attempt_at <= %s AND f.deleted_at IS NULL{extra} AND NOT {held("f")}
        ORDER BY p.next_attempt_at, p.file_id LIMIT %s
        """,
        (now, *params, limit),
    )


def lock_skip_locked(conn: Conn, file_ids: Sequence[UUID]) -> list[UUID]:
    """Lock the rows (ascending id); a row another transaction holds (an attach, a delete) is skipped and
    met again by the next run."""
    return [
        row.id
        for row in conn.execute(
            "SELECT id FROM files WHERE id = ANY(%s) ORDER BY id FOR UPDATE SKIP LOCKED", (list(file_ids),)
        )
    ]


def cleanup_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[CleanupFacts]:
    """The facts the pure rules re-check, read after the lock (a fresh statement sees committed attaches)."""
    return all_as(
        conn,
        CleanupFacts,
        """
        SELECT f.id, f.uploaded_by, f.purpose, f.upload_state, f.scan_status, f.created_at, f.scanned_at,
               f.deleted_at IS NOT NULL AS deleted,
               EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id) AS attached,
               s.state AS session_state, s.completed_at, s.expires_at
        FROM files f LEFT JOIN upload_sessions s ON s.file_id = f.id
        WHERE f.id = ANY(%s) ORDER BY f.id
        """,
        (list(file_ids),),
    )


def protected_by_own_drafts(conn: Conn, pairs: Sequence[tuple[UUID, UUID]]) -> set[UUID]:
    """Of (file id, uploader id) pairs, the files that a draft of their own uploader names (D8 b). One
    query for the whole batch; a file in somebody else's draft is not protected."""
    if not pairs:
        return set()
    file_ids, uploaders = zip(*pairs, strict=True)
    return {
        row.id
        for row in conn.execute(
            """
        SELECT c.id FROM unnest(%s::uuid[], %s::uuid[]) AS c(id, uploader)
        WHERE EXISTS (SELECT 1 FROM drafts d WHERE d.user_id = c.uploader AND c.id = ANY(d.file_ids))
        """,
            (list(file_ids), list(uploaders)),
        )
    }


@dataclass(frozen=True)
class OpenSession:
    """An open upload session, as step a reads it."""

    file_id: UUID
    state: str
    expires_at: datetime


@dataclass(frozen=True)
class Count:
    """How many, and the oldest time among them (None when none)."""

    n: int
    oldest: datetime | None


@dataclass(frozen=True)
class PendingScanFacts:
    """What step j decides on."""

    id: UUID
    upload_state: str
    scan_status: str
    deleted: bool
    last_change_at: datetime
    scan_resent_at: datetime | None


_OPEN_SESSIONS = """
    SELECT s.file_id, s.state, s.expires_at FROM upload_sessions s JOIN files f ON f.id = s.file_id
    WHERE s.file_id = ANY(%s) AND s.state = 'open' AND f.deleted_at IS NULL
    ORDER BY s.file_id"""


def open_sessions(conn: Conn, file_ids: Sequence[UUID]) -> list[OpenSession]:
    """The open sessions of files not deleted, without a lock (step a's decision, and its dry run)."""
    return all_as(conn, OpenSession, _OPEN_SESSIONS, (list(file_ids),))


def lock_open_sessions(conn: Conn, file_ids: Sequence[UUID]) -> list[OpenSession]:
    """Of files locked by the caller, lock the open sessions (after the files: D10) of files not deleted."""
    return all_as(conn, OpenSession, _OPEN_SESSIONS + " FOR UPDATE OF s", (list(file_ids),))


def expire_sessions(conn: Conn, file_ids: Sequence[UUID]) -> None:
    """Sessions become expired, their part rows go, and their files fail as of expires_at (D8 a)."""
    ids = list(file_ids)
    conn.execute("UPDATE upload_sessions SET state = 'expired' WHERE file_id = ANY(%s)", (ids,))
    conn.execute("DELETE FROM upload_parts WHERE file_id = ANY(%s)", (ids,))
    conn.execute(
        """
        UPDATE files f SET upload_state = 'failed', last_change_at = greatest(f.last_change_at, s.expires_at)
        FROM upload_sessions s WHERE s.file_id = f.id AND f.id = ANY(%s)
        """,
        (ids,),
    )


def backlog(conn: Conn) -> Count:
    """Deleted rows and the oldest mark (step f), but for those a legal hold covers: they wait by design, and
    the backlog alert must not fire for them."""
    return one_as(
        conn,
        Count,
        f"SELECT count(*)::int AS n, min(deleted_at) AS oldest FROM files f "
        f"WHERE deleted_at IS NOT NULL AND NOT {held('f')}",
    )


def objects_due_live(conn: Conn, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step d, third part: files not deleted that are final and not deliverable (failed, infected, error), of
    every purpose, whose objects no purge has removed yet (objects_purged_at unset); those the store refused
    are left to the second part, which honours their next attempt (index files_objects_due). A lost purge job
    of a failing transition is caught up here (D7, D19)."""
    extra, params = after(cursor, "last_change_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files f
        WHERE deleted_at IS NULL AND objects_purged_at IS NULL
          AND (upload_state = 'failed' OR scan_status IN ('infected', 'error')){extra}
          AND NOT EXISTS (SELECT 1 FROM purge_failures p WHERE p.file_id = f.id) AND NOT {held("f")}
        ORDER BY last_change_at, id LIMIT %s
        """,
        (*params, limit),
    )


def pending_scans(conn: Conn, cutoff: datetime, cursor: Cursor, limit: int) -> list[Candidate]:
    """Step j: complete files not deleted whose scan is still pending, last changed at or before cutoff
    (index files_scan_pending)."""
    extra, params = after(cursor, "last_change_at")
    return all_as(
        conn,
        Candidate,
        f"""
        SELECT id, last_change_at AS at FROM files
        WHERE deleted_at IS NULL AND upload_state = 'complete' AND scan_status = 'pending'
          AND last_change_at <= %s{extra}
        ORDER BY last_change_at, id LIMIT %s
        """,
        (cutoff, *params, limit),
    )


def pending_scan_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[PendingScanFacts]:
    """What step j decides on, read after the lock."""
    return all_as(
        conn,
        PendingScanFacts,
        """
                  SELECT id, upload_state, scan_status, deleted_at IS NOT NULL AS deleted, last_change_at,
                         scan_resent_at
                  FROM files WHERE id = ANY(%s) ORDER BY id
                  """,
        (list(file_ids),),
    )


def set_scan_resent(conn: Conn, file_ids: Sequence[UUID], now: datetime) -> None:
    """Record that the scan of these files was sent again (once, D19); their age is unchanged."""
    conn.execute("UPDATE files SET scan_resent_at = %s WHERE id = ANY(%s)", (now, list(file_ids)))


def pending_summary(conn: Conn) -> Count:
    """Complete files whose scan is pending, and the oldest of them (the scan gauges)."""
    return one_as(
        conn,
        Count,
        """
                  SELECT count(*)::int AS n, min(last_change_at) AS oldest FROM files
                  WHERE deleted_at IS NULL AND upload_state = 'complete' AND scan_status = 'pending'
                  """,
    )
