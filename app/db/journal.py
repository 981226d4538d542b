"""SQL of the deletion journal: entries committed with their change (journal_pending), numbered when a writer
claims them and kept a while after they were written (a spooled entry is matched by its id), and where this
database stands against the journal (journal_state: its installation, its position, the claim of the segment
being written, a reconciliation's progress, damage found, other installations' journals it adopted or refused).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.conn import Conn, all_as, one_as
from app.domain.journal import Damage, Entry

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
    head_digest: str | None
    damaged: dict[str, Any] | None
    foreign_installations: list[UUID]
    adopted_from: UUID | None

    @property
    def damage(self) -> Damage | None:
        """The damage a reconciliation found in the journal, until one gets past it."""
        if not self.damaged:
            return None
        return Damage(str(self.damaged.get("where")), str(self.damaged.get("what")), self.damaged.get("line"))


_STATE = (
    "installation_id, hash_key, position, writing_first, writing_last, reconciled_to, restore_seen_at, "
    "reconciled_at, head_digest, damaged, foreign_installations, adopted_from"
)


@dataclass(frozen=True)
class PendingRow:
    """An entry committed with its change, not yet written to the journal (or numbered by a claim)."""

    entry_id: UUID
    kind: str
    at: datetime
    body: dict[str, Any]
    seq: int | None


@dataclass(frozen=True)
class Claim:
    """A segment a writer claimed: its numbers, the entries it holds, the digest of the segment before it."""

    installation_id: UUID
    position: int
    first: int
    last: int
    prev: str | None
    rows: tuple[PendingRow, ...]


def state(conn: Conn) -> JournalState:
    """The database's journal state (one row, made by the migration)."""
    return one_as(conn, JournalState, f"SELECT {_STATE} FROM journal_state")


def append(conn: Conn, entries: Sequence[Entry]) -> tuple[UUID, list[Entry]]:
    """Commit entries with the caller's change (they are numbered when a writer claims them).

    Returns:
        The installation they belong to, and the entries with their ids (the committing process keeps them
        until they are in the journal).
    """
    stored = [entry if entry.id is not None else _with_id(entry) for entry in entries]
    installation: UUID | None = None
    for entry in stored:
        row = conn.execute(
            "INSERT INTO journal_pending (entry_id, kind, at, body) VALUES (%s, %s, %s, %s) "
            "RETURNING (SELECT installation_id FROM journal_state)",
            (entry.id, entry.kind, entry.at, Jsonb(entry.body())),
        ).fetchone()
        installation = row[0] if row else None
    assert installation is not None or not stored
    return installation or uuid.UUID(int=0), stored


def _with_id(entry: Entry) -> Entry:
    from dataclasses import replace

    return replace(entry, id=uuid.uuid4())


def adopt_entries(conn: Conn, entries: Sequence[Entry]) -> int:
    """Spooled entries this database did not know, committed again (each once: by its id) so that the journal
    numbers them."""
    count = 0
    for entry in entries:
        count += conn.execute(
            "INSERT INTO journal_pending (entry_id, kind, at, body) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (entry_id) DO NOTHING",
            (entry.id, entry.kind, entry.at, Jsonb(entry.body())),
        ).rowcount
    return count


def claim(conn: Conn, limit: int, lease_s: float, writer: UUID) -> Claim | None:
    """Claim the next segment, inside the caller's transaction: the state row is locked (SKIP LOCKED: a writer
    that finds it taken leaves, the one holding it takes what the leaver committed on its next round), the
    oldest unnumbered entries get the numbers after the position, and the claim is leased. A claim whose lease
    ran out (its writer died), or this writer's own, is taken over as it stands: the same entries, the same
    numbers, so the segment is written the same again.

    Returns:
        The claim (rows empty: nothing to write), or None when another writer holds the claim.
    """
    row = conn.execute(
        "SELECT installation_id, position, writing_first, writing_last, head_digest, "
        "writing_until > now() AS leased, writing_by FROM journal_state FOR UPDATE SKIP LOCKED"
    ).fetchone()
    if row is None:
        return None
    installation, position, first, last, prev, leased, by = row
    if first is not None:
        if leased and by != writer:
            return None
        rows = all_as(
            conn,
            PendingRow,
            "SELECT entry_id, kind, at, body, seq FROM journal_pending WHERE seq BETWEEN %s AND %s ORDER BY seq",
            (first, last),
        )
    else:
        rows = all_as(
            conn,
            PendingRow,
            """
            WITH taken AS (SELECT id FROM journal_pending WHERE seq IS NULL ORDER BY id LIMIT %s
                           FOR UPDATE SKIP LOCKED),
                 numbered AS (SELECT id, %s + row_number() OVER (ORDER BY id) AS seq FROM taken)
            UPDATE journal_pending p SET seq = numbered.seq FROM numbered WHERE p.id = numbered.id
            RETURNING p.entry_id, p.kind, p.at, p.body, p.seq""",
            (limit, position),
        )
        rows.sort(key=lambda pending: pending.seq or 0)
        if not rows:
            return Claim(installation, position, position + 1, position, prev, ())
        first, last = position + 1, position + len(rows)
    conn.execute(
        "UPDATE journal_state SET writing_first = %s, writing_last = %s, writing_by = %s, "
        "writing_until = now() + make_interval(secs => %s)",
        (first, last, writer, lease_s),
    )
    return Claim(installation, position, first, last, prev, tuple(rows))


def claim_next(conn: Conn, limit: int, lease_s: float, writer: UUID) -> Claim | None:
    """claim() in one statement on an autocommit connection, for the common case (no claim stands): the state row
    locked (SKIP LOCKED), the oldest unnumbered entries numbered after the position, the claim leased, and the
    numbered entries answered, in one round trip. When a claim stands (another writer's, or one to take over),
    it answers as claim() does in a transaction of its own.

    Returns:
        The claim (rows empty: nothing to write), or None when another writer holds the claim.
    """
    rows = conn.execute(
        """
        WITH st AS (
            SELECT installation_id, position, writing_first, head_digest FROM journal_state FOR UPDATE SKIP LOCKED
        ), taken AS (
            SELECT p.id FROM journal_pending p WHERE p.seq IS NULL AND EXISTS (SELECT 1 FROM st WHERE
                st.writing_first IS NULL)
            ORDER BY p.id LIMIT %(limit)s FOR UPDATE OF p SKIP LOCKED
        ), numbered AS (
            SELECT taken.id, st.position + row_number() OVER (ORDER BY taken.id) AS seq FROM taken, st
        ), took AS (
            UPDATE journal_pending p SET seq = numbered.seq FROM numbered WHERE p.id = numbered.id
            RETURNING p.entry_id, p.kind, p.at, p.body, p.seq
        ), claimed AS (
            UPDATE journal_state SET writing_first = st.position + 1,
                   writing_last = st.position + (SELECT count(*) FROM numbered), writing_by = %(writer)s,
                   writing_until = now() + make_interval(secs => %(lease)s)
            FROM st WHERE st.writing_first IS NULL AND EXISTS (SELECT 1 FROM numbered)
        )
        SELECT st.installation_id, st.position, st.writing_first, st.head_digest,
               took.entry_id, took.kind, took.at, took.body, took.seq
        FROM st LEFT JOIN took ON true""",
        {"limit": limit, "writer": writer, "lease": lease_s},
    ).fetchall()
    if not rows:
        return None  # another writer holds the state row right now
    installation, position, standing, prev = rows[0][:4]
    if standing is not None:  # a claim stands: another writer's, or one to take over as it stands
        with conn.transaction():
            return claim(conn, limit, lease_s, writer)
    pending = sorted((PendingRow(*row[4:]) for row in rows if row[4] is not None), key=lambda row: row.seq or 0)
    if not pending:
        return Claim(installation, position, position + 1, position, prev, ())
    return Claim(installation, position, position + 1, position + len(pending), prev, tuple(pending))


def finish(conn: Conn, claimed: Claim, segment_digest: str) -> bool:
    """The claimed segment is in the journal: the position moves past it (if the claim still stands)."""
    return (
        conn.execute(
            "UPDATE journal_state SET position = %s, head_digest = %s, writing_first = NULL, "
            "writing_last = NULL, writing_until = NULL, writing_by = NULL "
            "WHERE writing_first = %s AND position = %s",
            (claimed.last, segment_digest, claimed.first, claimed.position),
        ).rowcount
        == 1
    )


def release(conn: Conn, claimed: Claim) -> None:
    """Give a claim up unwritten (the journal already holds its numbers: the database is behind it): its
    entries are numbered again once the database stands at the journal's head."""
    conn.execute("UPDATE journal_pending SET seq = NULL WHERE seq BETWEEN %s AND %s", (claimed.first, claimed.last))
    conn.execute(
        "UPDATE journal_state SET writing_first = NULL, writing_last = NULL, writing_until = NULL, "
        "writing_by = NULL WHERE writing_first = %s",
        (claimed.first,),
    )


def written_among(conn: Conn, entry_ids: Sequence[UUID]) -> set[UUID]:
    """Which of these entries are in the journal (numbered at or before the position)."""
    rows = conn.execute(
        "SELECT entry_id FROM journal_pending p, journal_state s WHERE p.entry_id = ANY(%s) AND p.seq <= s.position",
        (list(entry_ids),),
    ).fetchall()
    return {row[0] for row in rows}


def known_among(conn: Conn, entry_ids: Sequence[UUID]) -> set[UUID]:
    """Which of these entries the database holds (waiting, or written and kept a while)."""
    rows = conn.execute("SELECT entry_id FROM journal_pending WHERE entry_id = ANY(%s)", (list(entry_ids),)).fetchall()
    return {row[0] for row in rows}


def prune_written(conn: Conn, written_before: datetime, limit: int = 10_000) -> int:
    """Forget entries written to the journal that committed before `written_before` (they were kept so that a
    spooled entry is recognised)."""
    return conn.execute(
        "DELETE FROM journal_pending WHERE id IN (SELECT id FROM journal_pending p, journal_state s "
        "WHERE p.seq <= s.position AND p.at < %s LIMIT %s)",
        (written_before, limit),
    ).rowcount


def pending_count(conn: Conn) -> int:
    """How many entries wait for the journal (unnumbered, or in a claim not yet written)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM journal_pending WHERE seq IS NULL) + (SELECT count(*) FROM "
        "journal_pending p, journal_state s WHERE p.seq > s.position)"
    ).fetchone()
    return int(row[0]) if row else 0


def oldest_pending_at(conn: Conn) -> datetime | None:
    """When the oldest entry still waiting for the journal committed (None: none waits)."""
    row = conn.execute(
        "SELECT least((SELECT min(at) FROM journal_pending WHERE seq IS NULL), (SELECT min(p.at) FROM "
        "journal_pending p, journal_state s WHERE p.seq > s.position))"
    ).fetchone()
    return row[0] if row else None


def restore_seen(conn: Conn, now: datetime) -> None:
    """Record when the database was first seen behind its journal."""
    conn.execute("UPDATE journal_state SET restore_seen_at = coalesce(restore_seen_at, %s)", (now,))


def applied(conn: Conn, seq: int) -> None:
    """A reconciliation applied the journal up to this entry (resumable from the next one)."""
    conn.execute("UPDATE journal_state SET reconciled_to = greatest(reconciled_to, %s)", (seq,))


def reconciled(conn: Conn, head: int, head_digest: str | None, now: datetime) -> None:
    """The database has applied its journal to the head: it stands at the head again. A claim it held from before
    the restore goes (its entries are numbered again after the head); damage it had found is mended."""
    conn.execute("UPDATE journal_pending SET seq = NULL WHERE seq > (SELECT position FROM journal_state)")
    conn.execute(
        "UPDATE journal_state SET position = greatest(position, %s), head_digest = coalesce(%s, head_digest), "
        "reconciled_to = 0, restore_seen_at = NULL, reconciled_at = %s, damaged = NULL, writing_first = NULL, "
        "writing_last = NULL, writing_until = NULL, writing_by = NULL",
        (head, head_digest, now),
    )


def set_damaged(conn: Conn, damage: Damage | None) -> None:
    """Record the damage a reconciliation found (None: none)."""
    conn.execute("UPDATE journal_state SET damaged = %s", (Jsonb(damage.as_dict()) if damage else None,))


def adopt(conn: Conn, installation_id: UUID) -> UUID:
    """Take another installation's journal as this database's own (a database restored from a backup older than
    the journal): from position 0, so that every entry of it is applied. Returns the id it had."""
    row = conn.execute("SELECT installation_id FROM journal_state FOR UPDATE").fetchone()
    assert row is not None
    conn.execute(
        "UPDATE journal_state SET installation_id = %s, adopted_from = %s, position = 0, reconciled_to = 0, "
        "head_digest = NULL, writing_first = NULL, writing_last = NULL, writing_until = NULL, "
        "writing_by = NULL",
        (installation_id, row[0]),
    )
    conn.execute("UPDATE journal_pending SET seq = NULL WHERE seq IS NOT NULL")
    return UUID(str(row[0]))


def refuse(conn: Conn, installation_id: UUID) -> None:
    """Another installation's journal is foreign to this database: never adopted, never a reason to wait."""
    conn.execute(
        "UPDATE journal_state SET foreign_installations = array_append(foreign_installations, %s) "
        "WHERE NOT %s = ANY(foreign_installations)",
        (installation_id, installation_id),
    )


def holds_files(conn: Conn) -> bool:
    """Whether the database holds any file (a database restored from a backup older than its journal does)."""
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM files)").fetchone()
    return bool(row and row[0])


def known_principals(conn: Conn) -> list[UUID]:
    """Every person id the database knows of: uploaders, authors, draft owners, slot holders, held subjects,
    erased subjects (a journaled person's hash is matched against these)."""
    rows = conn.execute(
        """
        SELECT uploaded_by FROM files UNION SELECT author_id FROM messages UNION SELECT user_id FROM drafts
        UNION SELECT holder_id FROM slots UNION SELECT subject_id FROM legal_holds WHERE subject_id IS NOT NULL
        UNION SELECT subject_id FROM erasures
        """
    ).fetchall()
    return [row[0] for row in rows if row[0] is not None]
