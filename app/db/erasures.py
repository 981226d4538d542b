"""SQL of the erasure of a person (D16). Lock order (D10): slots, then messages (by id), then files ascending,
then attachments, then what mark_deleted locks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one_as

COLUMNS = (
    "id, subject_id, state, reason, created_at, finished_at, files_marked, files_purged, "
    "keys_confirmed_absent, messages_removed, drafts_removed"
)


@dataclass(frozen=True)
class ErasureRow:
    """An erasure: its subject (forgotten once complete), state, and counts."""

    id: UUID
    subject_id: UUID | None
    state: str
    reason: str | None
    created_at: datetime
    finished_at: datetime | None
    files_marked: int
    files_purged: int
    keys_confirmed_absent: int
    messages_removed: int
    drafts_removed: int


@dataclass(frozen=True)
class MessageKey:
    """A message of the subject, by its author and id."""

    author_id: UUID
    id: str


@dataclass(frozen=True)
class ErasedFile:
    """A file of the subject as the erasure lists it: its id, its stored key, its part count, its deletion."""

    id: UUID
    deleted_at: datetime | None
    object_key: str | None
    part_count: int


@dataclass(frozen=True)
class ListedFile:
    """A file the erasure listed, with the facts its keys are read again from."""

    file_id: UUID
    object_key: str | None
    part_count: int
    keys_locked: int = 0  # versions a bucket's object lock keeps, sealed under a destroyed key (its receipt's)


@dataclass(frozen=True)
class Remaining:
    """What is left of the subject."""

    files: int
    messages: int
    drafts: int
    slots: int
    events: int
    unconfirmed: int

    def as_counts(self) -> dict[str, int]:
        """The counts, for a log line."""
        return {
            "files": self.files,
            "messages": self.messages,
            "drafts": self.drafts,
            "slots": self.slots,
            "events": self.events,
            "unconfirmed": self.unconfirmed,
        }


def start(conn: Conn, erasure_id: UUID, subject_id: UUID, now: datetime) -> ErasureRow:
    """The running erasure of the subject: a new one, or the one already running (one statement, so two
    requests racing get one erasure)."""
    conn.execute(
        """
        INSERT INTO erasures (id, subject_id, state, created_at) VALUES (%s, %s, 'running', %s)
        ON CONFLICT (subject_id) WHERE state = 'running' DO NOTHING
        """,
        (erasure_id, subject_id, now),
    )
    return one_as(
        conn, ErasureRow, f"SELECT {COLUMNS} FROM erasures WHERE subject_id = %s AND state = 'running'", (subject_id,)
    )


def erasure(conn: Conn, erasure_id: UUID) -> ErasureRow | None:
    """The erasure's row, or None."""
    return first_as(conn, ErasureRow, f"SELECT {COLUMNS} FROM erasures WHERE id = %s", (erasure_id,))


def add_counts(conn: Conn, erasure_id: UUID, **counts: int) -> None:
    """Add to an erasure's counters (files_marked, files_purged, ...) in the caller's transaction."""
    assignments = ", ".join(f"{name} = {name} + %s" for name in counts)
    conn.execute(f"UPDATE erasures SET {assignments} WHERE id = %s", (*counts.values(), erasure_id))


def finish(conn: Conn, erasure_id: UUID, state: str, reason: str | None, now: datetime) -> None:
    """End an erasure. A complete one forgets its subject, and so does every earlier erasure of that subject
    (a failed one kept it): once one erasure of a person completed, no erasure row names them (D19)."""
    subject = conn.execute(
        """
        UPDATE erasures e SET state = %s, reason = %s, finished_at = %s,
               subject_id = CASE WHEN %s = 'complete' THEN NULL ELSE e.subject_id END
        FROM erasures old WHERE e.id = %s AND e.state = 'running' AND old.id = e.id
        RETURNING old.subject_id
        """,
        (state, reason, now, state, erasure_id),
    ).fetchone()
    if state == "complete" and subject is not None:
        conn.execute(
            "UPDATE erasures SET subject_id = NULL WHERE subject_id = %s AND state <> 'running'", (subject.subject_id,)
        )


def adopt_unconfirmed(conn: Conn, erasure_id: UUID, subject_id: UUID) -> int:
    """Take over the files an earlier, failed erasure of the subject purged without confirming their keys
    absent: their rows are gone, so only this list lets the new erasure read their keys again (D19)."""
    return conn.execute(
        """
        INSERT INTO erasure_files (erasure_id, file_id, object_key, part_count)
        SELECT %s, ef.file_id, ef.object_key, ef.part_count
        FROM erasures e JOIN erasure_files ef ON ef.erasure_id = e.id
        WHERE e.subject_id = %s AND e.state = 'failed' AND ef.confirmed_at IS NULL
        ON CONFLICT (erasure_id, file_id) DO NOTHING
        """,
        (erasure_id, subject_id),
    ).rowcount


# -- what the subject still has ------------------------------------------------------------------------------


def lock_messages_of(conn: Conn, subject_id: UUID, limit: int) -> list[MessageKey]:
    """Up to `limit` of the subject's messages, locked (D10: messages before files)."""
    return all_as(
        conn,
        MessageKey,
        "SELECT author_id, id FROM messages WHERE author_id = %s ORDER BY id LIMIT %s FOR UPDATE",
        (subject_id, limit),
    )


def files_of_messages(conn: Conn, subject_id: UUID, message_ids: Sequence[str]) -> list[UUID]:
    """The files attached to these messages of the subject, ascending id."""
    return [
        row.file_id
        for row in conn.execute(
            "SELECT file_id FROM attachments WHERE author_id = %s AND message_id = ANY(%s) ORDER BY file_id",
            (subject_id, list(message_ids)),
        )
    ]


def delete_messages(conn: Conn, subject_id: UUID, message_ids: Sequence[str]) -> int:
    """Remove the messages (their attachment rows go by ON DELETE CASCADE)."""
    return conn.execute(
        "DELETE FROM messages WHERE author_id = %s AND id = ANY(%s)", (subject_id, list(message_ids))
    ).rowcount


def lock_files_of(conn: Conn, subject_id: UUID, limit: int, after: UUID) -> list[ErasedFile]:
    """The subject's files rows (deleted or not), ascending id after a cursor, locked."""
    return all_as(
        conn,
        ErasedFile,
        """
        SELECT f.id, f.deleted_at, f.object_key, coalesce(s.part_count, 0) AS part_count
        FROM files f LEFT JOIN upload_sessions s ON s.file_id = f.id
        WHERE f.uploaded_by = %s AND f.id > %s ORDER BY f.id LIMIT %s FOR UPDATE OF f
        """,
        (subject_id, after, limit),
    )


def record_files(conn: Conn, erasure_id: UUID, rows: Sequence[ErasedFile]) -> None:
    """List files in the erasure (id, stored key, part count), keeping the widest facts seen."""
    with conn.cursor() as cur:
        cur.executemany(
            """
            INSERT INTO erasure_files (erasure_id, file_id, object_key, part_count) VALUES (%s, %s, %s, %s)
            ON CONFLICT (erasure_id, file_id) DO UPDATE
            SET object_key = coalesce(EXCLUDED.object_key, erasure_files.object_key),
                part_count = greatest(EXCLUDED.part_count, erasure_files.part_count)
            """,
            [(erasure_id, row.id, row.object_key, row.part_count) for row in rows],
        )


def delete_drafts_of(conn: Conn, subject_id: UUID) -> int:
    """Remove every draft of the subject; returns how many."""
    return conn.execute("DELETE FROM drafts WHERE user_id = %s", (subject_id,)).rowcount


def forget_events_of(conn: Conn, subject_id: UUID, erasure_id: UUID) -> int:
    """Remove every event addressed to the subject or about one of their files, and the subject as the
    actor of anyone else's events."""
    # One statement per index (events_audience, events_resource, events_actor): an OR over a subquery made
    # PostgreSQL scan the whole table.
    removed = conn.execute("DELETE FROM events WHERE audience_principal_id = %s", (subject_id,)).rowcount
    removed += conn.execute(
        """
        DELETE FROM events e USING erasure_files ef
        WHERE ef.erasure_id = %s AND e.resource_kind = 'file' AND e.resource_id = ef.file_id
        """,
        (erasure_id,),
    ).rowcount
    conn.execute("UPDATE events SET actor_id = NULL WHERE actor_id = %s", (subject_id,))
    return removed


def remaining(conn: Conn, subject_id: UUID, erasure_id: UUID) -> Remaining:
    """What is left of the subject: rows of theirs, and files of the erasure not yet confirmed absent."""
    return one_as(
        conn,
        Remaining,
        """
        SELECT (SELECT count(*) FROM files WHERE uploaded_by = %(s)s)::int AS files,
               (SELECT count(*) FROM messages WHERE author_id = %(s)s)::int AS messages,
               (SELECT count(*) FROM drafts WHERE user_id = %(s)s)::int AS drafts,
               (SELECT count(*) FROM slots WHERE holder_id = %(s)s)::int AS slots,
               ((SELECT count(*) FROM events WHERE audience_principal_id = %(s)s)
                   + (SELECT count(*) FROM events WHERE actor_id = %(s)s))::int AS events,
               (SELECT count(*) FROM erasure_files WHERE erasure_id = %(e)s AND confirmed_at IS NULL)::int
                   AS unconfirmed
        """,
        {"s": subject_id, "e": erasure_id},
    )


def servable_left(conn: Conn, subject_id: UUID) -> int:
    """How many rows of the subject a reader could still be served (live files, messages, drafts, slots, events
    addressed to or made by them): an erasure's marks are applied when none is left."""
    row = conn.execute(
        """
        SELECT (SELECT count(*) FROM files WHERE uploaded_by = %(s)s AND deleted_at IS NULL)
             + (SELECT count(*) FROM messages WHERE author_id = %(s)s)
             + (SELECT count(*) FROM drafts WHERE user_id = %(s)s)
             + (SELECT count(*) FROM slots WHERE holder_id = %(s)s)
             + (SELECT count(*) FROM events WHERE audience_principal_id = %(s)s OR actor_id = %(s)s)
        """,
        {"s": subject_id},
    ).fetchone()
    return int(row[0]) if row else 0


def unconfirmed_purged(conn: Conn, erasure_id: UUID, limit: int, after: UUID) -> list[ListedFile]:
    """Files of the erasure whose rows are gone and whose keys are not confirmed absent yet, by file id."""
    return all_as(
        conn,
        ListedFile,
        """
        SELECT ef.file_id, ef.object_key, ef.part_count,
               coalesce((SELECT r.keys_locked FROM receipts r WHERE r.file_id = ef.file_id), 0) AS keys_locked
        FROM erasure_files ef
        WHERE ef.erasure_id = %s AND ef.confirmed_at IS NULL AND ef.file_id > %s
          AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = ef.file_id)
        ORDER BY ef.file_id LIMIT %s
        """,
        (erasure_id, after, limit),
    )


def deleted_files_of(conn: Conn, erasure_id: UUID, limit: int, after: UUID) -> list[UUID]:
    """Files of the erasure whose rows are still there (marked deleted): the purge's work, by file id."""
    return [
        row.file_id
        for row in conn.execute(
            """
        SELECT ef.file_id FROM erasure_files ef JOIN files f ON f.id = ef.file_id
        WHERE ef.erasure_id = %s AND f.deleted_at IS NOT NULL AND ef.file_id > %s ORDER BY ef.file_id LIMIT %s
        """,
            (erasure_id, after, limit),
        )
    ]


def set_confirmed(conn: Conn, erasure_id: UUID, counts: dict[UUID, int], now: datetime) -> dict[UUID, int]:
    """Confirm the keys of these files absent, each once: returns only the files confirmed by this call (their
    key counts), so that two rounds reading the same file count it once (D19)."""
    return {
        row.file_id: row.keys_absent
        for row in conn.execute(
            """
        UPDATE erasure_files ef SET confirmed_at = %s, keys_absent = c.n
        FROM unnest(%s::uuid[], %s::int[]) AS c(id, n)
        WHERE ef.erasure_id = %s AND ef.file_id = c.id AND ef.confirmed_at IS NULL
        RETURNING ef.file_id, ef.keys_absent
        """,
            (now, list(counts), list(counts.values()), erasure_id),
        )
    }


def forget_files_in_drafts(conn: Conn, erasure_id: UUID) -> int:
    """Remove the erasure's file ids from every draft, anyone's (a draft may name another person's file, D3);
    returns the drafts changed."""
    return conn.execute(
        """
        WITH erased AS (SELECT array_agg(file_id) AS ids FROM erasure_files WHERE erasure_id = %s)
        UPDATE drafts d SET file_ids = ARRAY(SELECT x FROM unnest(d.file_ids) WITH ORDINALITY AS t(x, n)
                                             WHERE x <> ALL(erased.ids) ORDER BY n)
        FROM erased WHERE d.file_ids && erased.ids
        """,
        (erasure_id,),
    ).rowcount


def file_ids_of(conn: Conn, erasure_id: UUID) -> list[UUID]:
    """The ids of every file the erasure listed, ascending."""
    return [
        row.file_id
        for row in conn.execute(
            "SELECT file_id FROM erasure_files WHERE erasure_id = %s ORDER BY file_id", (erasure_id,)
        )
    ]


def running_ids(conn: Conn) -> list[UUID]:
    """The ids of the erasures still running, oldest first (cleanup step i)."""
    return [row.id for row in conn.execute("SELECT id FROM erasures WHERE state = 'running' ORDER BY created_at")]
