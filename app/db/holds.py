"""SQL of legal holds (issue 27, D19): the holds themselves, and the one rule every purge path shares, which
files an active hold covers (a hold on the file, or on its uploader)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

from app.db.conn import Conn, one


def covered(alias: str = "f") -> str:
    """The condition that an active hold covers the file row `alias` (two index lookups, never a scan of files)."""
    return (f"(EXISTS (SELECT 1 FROM legal_holds lh WHERE lh.file_id = {alias}.id AND lh.released_at IS NULL)"
            f" OR EXISTS (SELECT 1 FROM legal_holds lh WHERE lh.subject_id = {alias}.uploaded_by"
            f" AND lh.released_at IS NULL))")


# What a hold defers: a deleted file, or a live one that is final and not deliverable whose objects no purge
# removed yet (failed, infected, error: D7 purges its objects). A hold covers both; only the first is counted
# as "deferred" in the answers and the gauge (the users deleted those).
_PURGE_DUE = ("(f.deleted_at IS NOT NULL OR (f.objects_purged_at IS NULL"
              " AND (f.upload_state = 'failed' OR f.scan_status IN ('infected', 'error'))))")

# The files a hold `h` covers, as a join condition on `f` (the hold need not be active: the receipts read
# released ones).
OF_HOLD = "(f.id = h.file_id OR f.uploaded_by = h.subject_id)"

COLUMNS = ("h.id, h.subject_id, h.file_id, h.case_ref, h.created_at, h.released_at, "
           f"coalesce(h.files_deferred, (SELECT count(*) FROM files f WHERE {OF_HOLD}"
           " AND f.deleted_at IS NOT NULL))::int AS files_deferred")


def insert(conn: Conn, hold_id: UUID, subject_id: UUID | None, file_id: UUID | None, case_ref: str,
           now: datetime) -> None:
    """Record a new hold (the caller checked its form and its target)."""
    conn.execute("INSERT INTO legal_holds (id, subject_id, file_id, case_ref, created_at) VALUES (%s, %s, %s, %s, %s)",
                 (hold_id, subject_id, file_id, case_ref, now))


def hold(conn: Conn, hold_id: UUID) -> Any:
    """The hold with its count of deferred files (live while it is active, as it was at release after), or None."""
    return conn.execute(f"SELECT {COLUMNS} FROM legal_holds h WHERE h.id = %s", (hold_id,)).fetchone()


def page(conn: Conn, after: UUID | None, limit: int) -> list[Any]:
    """Holds in the order they were placed (created_at, id), after the hold `after` (index legal_holds_listed)."""
    where = "" if after is None else \
        "WHERE (h.created_at, h.id) > (SELECT created_at, id FROM legal_holds WHERE id = %(after)s)"
    return conn.execute(f"SELECT {COLUMNS} FROM legal_holds h {where} ORDER BY h.created_at, h.id LIMIT %(limit)s",
                        {"after": after, "limit": limit}).fetchall()


def release(conn: Conn, hold_id: UUID, now: datetime) -> Any:
    """Release an active hold, fixing its count of deferred files; None when it is unknown or released already."""
    return conn.execute(
        f"""
        UPDATE legal_holds h SET released_at = greatest(%(now)s, h.created_at),
            files_deferred = (SELECT count(*) FROM files f WHERE {OF_HOLD} AND f.deleted_at IS NOT NULL)
        WHERE h.id = %(id)s AND h.released_at IS NULL
        RETURNING {COLUMNS}
        """, {"id": hold_id, "now": now}).fetchone()


def freed(conn: Conn, hold_id: UUID, after: UUID, limit: int) -> list[UUID]:
    """Files the (released) hold covered whose purge is due and that no other active hold covers, by id."""
    return [row.id for row in conn.execute(
        f"""
        SELECT f.id FROM legal_holds h JOIN files f ON {OF_HOLD}
        WHERE h.id = %s AND f.id > %s AND {_PURGE_DUE} AND NOT {covered("f")}
        ORDER BY f.id LIMIT %s
        """, (hold_id, after, limit))]


def held_among(conn: Conn, file_ids: Sequence[UUID]) -> set[UUID]:
    """Which of these files an active hold covers: the purge's check at execution, right before it deletes
    any object (D7, D19). No row lock: a hold takes none, so a lock would order nothing, and locking a
    thousand rows costs the purge a write of each (the re-check under the row lock before the rows go is
    files.lock_deleted_unattached)."""
    return {row.id for row in conn.execute(
        f"SELECT f.id FROM files f WHERE f.id = ANY(%s) AND {covered('f')}", (list(file_ids),))}


def held_ids(conn: Conn, file_ids: Sequence[UUID]) -> set[UUID]:
    """Which of these file ids an active hold covers, with a row or without one (a hold on the id alone): the
    audit's --delete re-check (issue 27)."""
    ids = list(file_ids)
    return {row.id for row in conn.execute(
        f"""
        SELECT file_id AS id FROM legal_holds WHERE released_at IS NULL AND file_id = ANY(%s)
        UNION SELECT f.id FROM files f WHERE f.id = ANY(%s) AND {covered("f")}
        """, (ids, ids))}


def file_on_hold(conn: Conn, file_id: UUID) -> bool:
    """Whether an active hold covers this file (a best-effort removal of an aborted upload's parts waits)."""
    return bool(one(conn.execute(f"SELECT {covered('f')} AS on_hold FROM files f WHERE f.id = %s"
                                 " UNION ALL SELECT false LIMIT 1", (file_id,))).on_hold)


def subject_on_hold(conn: Conn, subject_id: UUID) -> bool:
    """Whether an active hold covers the subject or one of their files (their erasure is refused)."""
    return bool(one(conn.execute(
        """
        SELECT EXISTS (SELECT 1 FROM legal_holds WHERE subject_id = %(s)s AND released_at IS NULL)
            OR EXISTS (SELECT 1 FROM legal_holds lh JOIN files f ON f.id = lh.file_id
                       WHERE lh.released_at IS NULL AND f.uploaded_by = %(s)s) AS on_hold
        """, {"s": subject_id})).on_hold)


def summary(conn: Conn) -> Any:
    """Active holds, and the deleted files they hold back (the gauges of cleanup step f)."""
    return one(conn.execute(
        f"""
        SELECT (SELECT count(*) FROM legal_holds WHERE released_at IS NULL) AS active,
               (SELECT count(*) FROM files f WHERE f.deleted_at IS NOT NULL AND {covered("f")}) AS files_held
        """))


def delete_released(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` hold records released before cutoff, oldest first (index legal_holds_released)."""
    return conn.execute(
        """
        DELETE FROM legal_holds WHERE id IN (
            SELECT id FROM legal_holds WHERE released_at < %s ORDER BY released_at, id LIMIT %s)
        """, (cutoff, limit)).rowcount


def count_released(conn: Conn, cutoff: datetime) -> int:
    """How many hold records were released before cutoff (the cleanup's dry run)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM legal_holds WHERE released_at < %s", (cutoff,))).n)
