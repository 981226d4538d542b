"""SQL of legal holds (D19): the holds themselves, their counts, and what a release frees. Whether a hold covers
a file is the one rule's (app/db/keeps.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one, one_as
from app.db.keeps import ENDED, held

# What a hold defers: a deleted file, or a live one that is final and not deliverable whose objects no purge
# removed yet (failed, infected, error: D7 purges its objects). A hold covers both; only the first is counted
# as "deferred" in the answers and the gauge (the users deleted those).
_PURGE_DUE = f"(f.deleted_at IS NOT NULL OR (f.objects_purged_at IS NULL AND {ENDED}))"

# The files a hold `h` covers, as a join condition on `f` (the hold need not be active: the receipts read
# released ones).
OF_HOLD = "(f.id = h.file_id OR f.uploaded_by = h.subject_id)"

# What a hold keeps (a deleted file whose removal has not begun) and what it could not keep (a file whose removal
# had begun when the hold was placed: its row records it, D19).
_KEPT = "f.deleted_at IS NOT NULL AND f.removal_begun_at IS NULL"
_LOST = f"f.removal_begun_at IS NOT NULL AND {_PURGE_DUE}"

COLUMNS = (
    "h.id, h.subject_id, h.file_id, h.case_ref, h.created_at, h.released_at, "
    f"coalesce(h.files_deferred, (SELECT count(*) FROM files f WHERE {OF_HOLD} AND {_KEPT}))::int AS files_deferred, "
    "h.files_lost, "
    "h.subject_forgotten_at IS NOT NULL AS subject_forgotten"
)


@dataclass(frozen=True)
class HoldRow:
    """A legal hold: its target (subject or file; neither once a released hold forgot its person), case
    reference, times, and counts."""

    id: UUID
    subject_id: UUID | None
    file_id: UUID | None
    case_ref: str
    created_at: datetime
    released_at: datetime | None
    files_deferred: int
    files_lost: int
    subject_forgotten: bool


@dataclass(frozen=True)
class HoldSummary:
    """Active holds, and the deleted files they hold back."""

    active: int
    files_held: int


def insert(
    conn: Conn, hold_id: UUID, subject_id: UUID | None, file_id: UUID | None, case_ref: str, now: datetime
) -> None:
    """Record a new hold (the caller checked its form and its target, and holds removals back:
    keeps.lock_against_removals), with the count of the files it covers whose removal had begun: those it cannot
    keep. No removal of a covered file begins after this commit, so the count is fixed here."""
    conn.execute(
        f"""
        INSERT INTO legal_holds (id, subject_id, file_id, case_ref, created_at, files_lost)
        SELECT h.id, h.subject_id, h.file_id, h.case_ref, h.created_at,
               (SELECT count(*) FROM files f WHERE {OF_HOLD} AND {_LOST})
        FROM (VALUES (%s::uuid, %s::uuid, %s::uuid, %s::text, %s::timestamptz))
             AS h(id, subject_id, file_id, case_ref, created_at)
        """,
        (hold_id, subject_id, file_id, case_ref, now),
    )


def hold(conn: Conn, hold_id: UUID) -> HoldRow | None:
    """The hold with its count of deferred files (live while it is active, as it was at release after), or None."""
    return first_as(conn, HoldRow, f"SELECT {COLUMNS} FROM legal_holds h WHERE h.id = %s", (hold_id,))


def page(conn: Conn, after: UUID | None, limit: int) -> list[HoldRow]:
    """Holds in the order they were placed (created_at, id), after the hold `after` (index legal_holds_listed)."""
    where = (
        ""
        if after is None
        else "WHERE (h.created_at, h.id) > (SELECT created_at, id FROM legal_holds WHERE id = %(after)s)"
    )
    return all_as(
        conn,
        HoldRow,
        f"SELECT {COLUMNS} FROM legal_holds h {where} ORDER BY h.created_at, h.id LIMIT %(limit)s",
        {"after": after, "limit": limit},
    )


def release(conn: Conn, hold_id: UUID, now: datetime) -> HoldRow | None:
    """Release an active hold, fixing its count of deferred files; None when it is unknown or released already."""
    return first_as(
        conn,
        HoldRow,
        f"""
        UPDATE legal_holds h SET released_at = greatest(%(now)s, h.created_at),
            files_deferred = (SELECT count(*) FROM files f WHERE {OF_HOLD} AND {_KEPT})
        WHERE h.id = %(id)s AND h.released_at IS NULL
        RETURNING {COLUMNS}
        """,
        {"id": hold_id, "now": now},
    )


def freed(conn: Conn, hold_id: UUID, after: UUID, limit: int) -> list[UUID]:
    """Files the (released) hold covered whose purge is due and that no other active hold covers, by id."""
    return [
        row.id
        for row in conn.execute(
            f"""
        SELECT f.id FROM legal_holds h JOIN files f ON {OF_HOLD}
        WHERE h.id = %s AND f.id > %s AND {_PURGE_DUE} AND NOT {held("f")}
        ORDER BY f.id LIMIT %s
        """,
            (hold_id, after, limit),
        )
    ]


def subject_on_hold(conn: Conn, subject_id: UUID) -> bool:
    """Whether an active hold covers the subject or one of their files (their erasure is refused)."""
    return bool(
        one(
            conn.execute(
                """
        SELECT EXISTS (SELECT 1 FROM legal_holds WHERE subject_id = %(s)s AND released_at IS NULL)
            OR EXISTS (SELECT 1 FROM legal_holds lh JOIN files f ON f.id = lh.file_id
                       WHERE lh.released_at IS NULL AND f.uploaded_by = %(s)s) AS on_hold
        """,
                {"s": subject_id},
            )
        ).on_hold
    )


def summary(conn: Conn) -> HoldSummary:
    """Active holds, and the deleted files they hold back (the gauges of cleanup step f)."""
    return one_as(
        conn,
        HoldSummary,
        f"""
        SELECT (SELECT count(*) FROM legal_holds WHERE released_at IS NULL)::int AS active,
               (SELECT count(*) FROM files f WHERE f.deleted_at IS NOT NULL AND {held("f")})::int AS files_held
        """,
    )


def prune(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` hold records released before cutoff, oldest first (index legal_holds_released)."""
    return conn.execute(
        """
        DELETE FROM legal_holds WHERE id IN (
            SELECT id FROM legal_holds WHERE released_at < %s ORDER BY released_at, id LIMIT %s)
        """,
        (cutoff, limit),
    ).rowcount


def count_prunable(conn: Conn, cutoff: datetime) -> int:
    """How many hold records were released before cutoff (the cleanup's dry run)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM legal_holds WHERE released_at < %s", (cutoff,))).n)


def forget_subject(conn: Conn, subject_id: UUID, now: datetime) -> int:
    """A completed erasure of the person: the released holds that named them forget them (ids, times, counts
    stay); returns how many. An active hold blocks the erasure, so none is left to change."""
    return conn.execute(
        "UPDATE legal_holds SET subject_id = NULL, subject_forgotten_at = %s "
        "WHERE subject_id = %s AND released_at IS NOT NULL",
        (now, subject_id),
    ).rowcount
