"""SQL of the deletion journal: entries committed with their change (journal_pending), and where this database
stands against the journal (journal_state: its installation, its position, a reconciliation's progress)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.conn import Conn, all_as, one_as
from app.domain.journal import Entry

RECONCILE_LOCK_KEY = 0x6C65746865_07  # "lethe" + 7: one reconciliation at a time


@dataclass(frozen=True)
class JournalState:
    """The database's side of the journal."""

    installation_id: UUID
    hash_key: str
    position: int
    writing_first: int | None
    writing_last: int | None
    reconciled_to: int
    restore_seen_at: datetime | None
    reconciled_at: datetime | None


@dataclass(frozen=True)
class PendingRow:
    """An entry committed with its change, not yet in the journal."""

    id: int
    kind: str
    at: datetime
    body: dict[str, Any]


def state(conn: Conn) -> JournalState:
    """The database's journal state (one row, made by the migration)."""
    return one_as(conn, JournalState, "SELECT installation_id, hash_key, position, writing_first, writing_last, "
                  "reconciled_to, restore_seen_at, reconciled_at FROM journal_state")


def writing(conn: Conn, position: int, first: int, last: int) -> bool:
    """Record the segment about to be written (before its object exists), if the position is still `position`:
    a segment of exactly these numbers past the position is this write, never a sign of a restore."""
    return conn.execute("UPDATE journal_state SET writing_first = %s, writing_last = %s WHERE position = %s",
                        (first, last, position)).rowcount == 1


def append(conn: Conn, entries: Sequence[Entry]) -> None:
    """Commit entries with the caller's change; they are numbered when a segment takes them."""
    for entry in entries:
        conn.execute("INSERT INTO journal_pending (kind, at, body) VALUES (%s, %s, %s)",
                     (entry.kind, entry.at, Jsonb(entry.body())))


def pending(conn: Conn, limit: int) -> list[PendingRow]:
    """The oldest entries not yet in the journal, in commit order."""
    return all_as(conn, PendingRow, "SELECT id, kind, at, body FROM journal_pending ORDER BY id LIMIT %s", (limit,))


def pending_count(conn: Conn) -> int:
    """How many entries wait for the journal."""
    row = conn.execute("SELECT count(*) FROM journal_pending").fetchone()
    return int(row[0]) if row else 0


def written(conn: Conn, ids: Sequence[int], old_position: int, new_position: int) -> bool:
    """The entries went into a segment: forget them and move the position, if nobody moved it meanwhile."""
    moved = conn.execute("UPDATE journal_state SET position = %s, writing_first = NULL, writing_last = NULL "
                         "WHERE position = %s", (new_position, old_position)).rowcount
    if moved != 1:
        return False
    conn.execute("DELETE FROM journal_pending WHERE id = ANY(%s)", (list(ids),))
    return True


def restore_seen(conn: Conn, now: datetime) -> None:
    """Record when the database was first seen behind its journal."""
    conn.execute("UPDATE journal_state SET restore_seen_at = coalesce(restore_seen_at, %s)", (now,))


def applied(conn: Conn, seq: int) -> None:
    """A reconciliation applied the journal up to this entry (resumable from the next one)."""
    conn.execute("UPDATE journal_state SET reconciled_to = greatest(reconciled_to, %s)", (seq,))


def reconciled(conn: Conn, head: int, now: datetime) -> None:
    """The database has applied its journal to the head: it stands at the head again."""
    conn.execute("UPDATE journal_state SET position = greatest(position, %s), reconciled_to = 0, "
                 "restore_seen_at = NULL, reconciled_at = %s", (head, now))


def known_principals(conn: Conn) -> list[UUID]:
    """Every person id the database knows of: uploaders, authors, draft owners, slot holders, held subjects,
    erased subjects (a journaled person's hash is matched against these)."""
    rows = conn.execute(
        """
        SELECT uploaded_by FROM files UNION SELECT author_id FROM messages UNION SELECT user_id FROM drafts
        UNION SELECT holder_id FROM slots UNION SELECT subject_id FROM legal_holds WHERE subject_id IS NOT NULL
        UNION SELECT subject_id FROM erasures
        """).fetchall()
    return [row[0] for row in rows if row[0] is not None]
