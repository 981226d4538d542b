"""SQL of deletion receipts (D16): written when the purge removes a row (the Receipts subscriber of
app/lifecycle/ends.py), read by id, confirmed by the erasure, and removed after privacy.receipt_ttl by the
cleanup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one
from app.domain.ends import RemovedRow


@dataclass(frozen=True)
class ReceiptRow:
    """A deletion receipt (D16): name-free."""

    file_id: UUID
    via: str
    marked_at: datetime
    purged_at: datetime
    keys_deleted: int
    keys_confirmed_absent: int
    deferred_by_hold: UUID | None
    deferred_from: datetime | None
    deferred_until: datetime | None
    removal_began_at: datetime | None
    hold_too_late: bool
    variants_deleted: int = 0
    keys_locked: int = 0  # versions a bucket's object lock keeps, sealed under a data key destroyed at the purge
    stores: list[str] = field(default_factory=lambda: ["default"])  # the stores its objects were removed from


COLUMNS = (
    "file_id, via, marked_at, purged_at, keys_deleted, keys_confirmed_absent, deferred_by_hold, deferred_from, "
    "deferred_until, removal_began_at, hold_too_late, variants_deleted, keys_locked, stores"
)


def write(conn: Conn, rows: Sequence[RemovedRow], now: datetime) -> None:
    """A receipt per removed row. A file whose purge a released legal hold deferred (a hold that covered it
    while it was deleted) has it on its receipt: the hold released last, from the later of the mark and the
    first such hold's placement until the last release. A hold placed after the file's removal had begun could
    not keep its bytes: `hold_too_late` says so."""
    if not rows:
        return
    conn.execute(
        """
        INSERT INTO receipts (file_id, via, marked_at, purged_at, keys_deleted, deferred_by_hold, deferred_from,
                              deferred_until, removal_began_at, hold_too_late, variants_deleted, keys_locked,
                              stores)
        SELECT r.id, r.via, r.marked_at, greatest(%s, r.marked_at), r.keys, d.last_id,
               CASE WHEN d.last_id IS NOT NULL THEN greatest(d.first_placed, r.marked_at) END, d.last_released,
               r.begun,
               r.begun IS NOT NULL AND EXISTS (SELECT 1 FROM legal_holds h
                   WHERE (h.file_id = r.id OR h.subject_id = r.uploaded_by) AND h.created_at > r.begun),
               r.variants, r.locked, string_to_array(r.stores, ',')
        FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::timestamptz[], %s::timestamptz[], %s::int[], %s::int[],
                    %s::int[], %s::text[])
             AS r(id, uploaded_by, via, marked_at, begun, keys, variants, locked, stores)
        LEFT JOIN LATERAL (
            SELECT (array_agg(h.id ORDER BY h.released_at DESC, h.id))[1] AS last_id,
                   min(h.created_at) AS first_placed, max(h.released_at) AS last_released
            FROM legal_holds h
            WHERE (h.file_id = r.id OR h.subject_id = r.uploaded_by) AND h.released_at >= r.marked_at
            HAVING count(*) > 0
        ) d ON true
        ON CONFLICT (file_id) DO NOTHING
        """,
        (
            now,
            [row.file_id for row in rows],
            [row.uploaded_by for row in rows],
            [row.via for row in rows],
            [row.marked_at for row in rows],
            [row.removal_begun_at for row in rows],
            [row.keys_deleted for row in rows],
            [row.variants_deleted for row in rows],
            [row.keys_locked for row in rows],
            [",".join(row.stores) for row in rows],
        ),
    )


def receipt_of(conn: Conn, file_id: UUID) -> ReceiptRow | None:
    """The receipt of a purged file, or None."""
    return first_as(conn, ReceiptRow, f"SELECT {COLUMNS} FROM receipts WHERE file_id = %s", (file_id,))


def receipts_of(conn: Conn, file_ids: Sequence[UUID]) -> list[ReceiptRow]:
    """The receipts of these files, by file id."""
    return all_as(
        conn, ReceiptRow, f"SELECT {COLUMNS} FROM receipts WHERE file_id = ANY(%s) ORDER BY file_id", (list(file_ids),)
    )


def set_confirmed_absent(conn: Conn, counts: dict[UUID, int]) -> None:
    """Record how many keys of each file a read of the store found absent."""
    if counts:
        conn.execute(
            """
            UPDATE receipts r SET keys_confirmed_absent = c.n
            FROM unnest(%s::uuid[], %s::int[]) AS c(id, n) WHERE r.file_id = c.id
            """,
            (list(counts), list(counts.values())),
        )


def prune(conn: Conn, cutoff: datetime, limit: int) -> int:
    """Remove up to `limit` receipts purged before cutoff, oldest first (index receipts_purged)."""
    return conn.execute(
        """
        DELETE FROM receipts WHERE file_id IN (
            SELECT file_id FROM receipts WHERE purged_at < %s ORDER BY purged_at, file_id LIMIT %s)
        """,
        (cutoff, limit),
    ).rowcount


def count_prunable(conn: Conn, cutoff: datetime) -> int:
    """How many receipts were purged before cutoff (the cleanup's dry run)."""
    return int(one(conn.execute("SELECT count(*) AS n FROM receipts WHERE purged_at < %s", (cutoff,))).n)
