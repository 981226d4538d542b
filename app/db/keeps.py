"""SQL of the one rule for bytes (app/domain/ends.py): what it reads of a file, in one statement, and the
clearance every removal asks for right before it removes anything.

A removal of a file's bytes begins under a shared advisory lock, in the transaction that reads the holds and
writes `files.removal_begun_at` (the point of no return); placing a hold takes the same lock exclusively
(holds.place). So a hold either committed before a removal's clearance (the clearance sees it and keeps the
file) or counts that removal as begun (the hold's `files_lost`): no removal goes unseen by a hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from psycopg.rows import class_row

from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.ends import ByteFacts, Clearance, Reach, RemovalBegun, clearance_of

REMOVAL_LOCK_KEY = 0x6C65746865_03  # "lethe" + 3: removals (shared) against placing a hold (exclusive)


def held(alias: str = "f", file_id: str | None = None) -> str:
    """The condition that an active legal hold covers the file row `alias` (a hold on the file, or on its
    uploader): two index lookups, never a scan of files. With `file_id`, the id to look up a file hold by (a
    file id without a row)."""
    by_id = file_id or f"{alias}.id"
    return (
        f"(EXISTS (SELECT 1 FROM legal_holds lh WHERE lh.file_id = {by_id} AND lh.released_at IS NULL)"
        f" OR EXISTS (SELECT 1 FROM legal_holds lh WHERE lh.subject_id = {alias}.uploaded_by"
        f" AND lh.released_at IS NULL))"
    )


# Final and not deliverable (D3): failed, infected or error. D7 purges the objects of such a live file.
ENDED = "(f.upload_state = 'failed' OR (f.upload_state = 'complete' AND f.scan_status IN ('infected', 'error')))"


def byte_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[ByteFacts]:
    """What the rule reads of each of these files (with or without a row), in one statement."""
    with conn.cursor(row_factory=class_row(ByteFacts)) as cur:
        return cur.execute(
            f"""
            SELECT ids.id AS file_id, f.id IS NOT NULL AS "exists", {held("f", "ids.id")} AS held,
                   EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = ids.id) AS attached,
                   EXISTS (SELECT 1 FROM slots s WHERE s.file_id = ids.id) AS in_slot,
                   coalesce(EXISTS (SELECT 1 FROM drafts d WHERE d.user_id = f.uploaded_by
                                    AND ids.id = ANY(d.file_ids)), false) AS in_own_draft,
                   coalesce(f.deleted_at IS NOT NULL, false) AS deleted, coalesce({ENDED}, false) AS ended
            FROM unnest(%s::uuid[]) AS ids(id) LEFT JOIN files f ON f.id = ids.id
            """,
            (sorted(set(file_ids)),),
        ).fetchall()


def clearance(
    uow: UnitOfWork, file_ids: Sequence[UUID], reach: Reach, now: datetime, begins_removal: bool = True
) -> Clearance:
    """Ask the rule, right before a removal, inside the caller's transaction (which must commit before any
    object goes: K1). For the reach FILE, the rows of the freed files record that their removal begins now
    (the first time only): a hold placed after this commit counts them as lost, never as kept; and the end's
    subscribers hear of it in this transaction (`RemovalBegun`: their data keys are destroyed with it). A
    removal of copies that are not the file's content (a variant written after its file ended) begins nothing
    (`begins_removal` False): the original is still there for a hold to keep."""
    conn = uow.conn
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (REMOVAL_LOCK_KEY,))
    cleared = clearance_of(byte_facts(conn, file_ids), reach)
    if reach is Reach.FILE and cleared.freed and begins_removal:
        conn.execute(
            "UPDATE files SET removal_begun_at = coalesce(removal_begun_at, %s) WHERE id = ANY(%s)",
            (now, sorted(cleared.freed)),
        )
        # The subscribers of a file's end (app/lifecycle/ends.py), wired into the unit of work by the composition
        # root: this is the one place the point of no return is reached, whichever wing removes the bytes.
        event = RemovalBegun(tuple(sorted(cleared.freed)), now)
        for subscriber in uow.subscribers or ():
            subscriber.removal_begun(uow, event)
    return cleared


def lock_against_removals(conn: Conn) -> None:
    """Wait for the removals whose clearance is being written, and hold new ones back until this transaction
    ends (placing a hold: its counts then see every removal that began)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (REMOVAL_LOCK_KEY,))


def held_among(conn: Conn, file_ids: Sequence[UUID]) -> set[UUID]:
    """Which of these files an active legal hold covers now (with a row or without: a hold on the id)."""
    return {facts.file_id for facts in byte_facts(conn, file_ids) if facts.held}
