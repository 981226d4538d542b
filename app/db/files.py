"""SQL of the files table (D3). One function per statement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from app.db import redaction
from app.db.conn import Conn, one, one_as
from app.domain.ends import RemovedRow
from app.domain.purge_plan import PurgeFacts
from app.domain.redaction import BLANKED
from app.domain.variants import VARIANTS
from app.platform import tracing

# The variants ready, as the File document shows them (name, width, height, type): one primary-key lookup.
READY_VARIANTS = (
    "(SELECT coalesce(json_agg(json_build_object('name', v.name, 'width', v.width, 'height', v.height, "
    "'type', v.content_type) ORDER BY array_position(ARRAY["
    + ", ".join(f"'{name}'" for name in VARIANTS)
    + "], v.name)), '[]'::json) FROM file_variants v "
    "WHERE v.file_id = files.id AND v.state = 'ready') AS thumbnails"
)
COLUMNS = (
    "id, uploaded_by, purpose, original_name, mime_type, size_bytes, sha256, scope_id, object_key, "
    "upload_state, scan_status, created_at, scanned_at, deleted_at, last_change_at, retired_at, detected_type, "
    "completed_at, variants_state, variants_reason, encrypted, key_id, wrapped_key, piece_size, metadata_stripped, "
    "size_as_sent, store, " + READY_VARIANTS
)


@dataclass(frozen=True)
class FileRow:
    """A files row as the services read it (D3): typed, so that mypy sees its shape wherever it goes."""

    id: UUID
    uploaded_by: UUID
    purpose: str
    original_name: str
    mime_type: str
    size_bytes: int
    sha256: str | None
    scope_id: UUID | None
    object_key: str | None
    upload_state: str
    scan_status: str
    created_at: datetime
    scanned_at: datetime | None
    deleted_at: datetime | None
    last_change_at: datetime
    retired_at: datetime | None
    detected_type: str | None = None  # the type the first bytes show, read at completion
    completed_at: datetime | None = None  # when the content was completed (Last-Modified)
    variants_state: str | None = None  # pending, ready or refused; None: no variants are made of this file
    variants_reason: str | None = None  # why a file got no variants (app.domain.variants.REFUSALS)
    thumbnails: list[dict[str, Any]] = field(default_factory=list)  # the variants ready (File document)
    encrypted: bool = False  # its objects are sealed under its own data key (app/storage/codec.py)
    key_id: str | None = None  # the keyring key that wrapped its data key; None once the key is destroyed
    wrapped_key: bytes | None = field(default=None, repr=False)
    piece_size: int | None = None  # plaintext bytes of each sealed piece of its original (its part size)
    metadata_stripped: str | None = None  # what its stored original no longer holds: 'location', 'all' (or None)
    size_as_sent: int | None = None  # the size sent, when the stored original is another (stripped)
    store: str = "default"  # the store that holds every object of it (file.stores)

    @property
    def sent_size(self) -> int:
        """The size the uploader declared and sent (what tus reports of a complete upload)."""
        return self.size_bytes if self.size_as_sent is None else self.size_as_sent


def _rows(conn: Conn) -> psycopg.Cursor[FileRow]:
    return conn.cursor(row_factory=class_row(FileRow))


def insert_file(conn: Conn, row: dict[str, Any]) -> FileRow:
    """Insert the row of a new upload (uploading, scan pending); a sealed one with its wrapped data key. Returns
    the row as a read would (no round trip of its own)."""
    row = {"encrypted": False, "key_id": None, "wrapped_key": None, "piece_size": None, "store": "default", **row}
    return one_as(
        conn,
        FileRow,
        f"""
        INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, scope_id, object_key,
                           upload_state, scan_status, created_at, last_change_at, encrypted, key_id, wrapped_key,
                           piece_size, store)
        VALUES (%(id)s, %(uploaded_by)s, %(purpose)s, %(original_name)s, %(mime_type)s, %(size_bytes)s,
                %(scope_id)s, %(object_key)s, 'uploading', 'pending', %(created_at)s, %(created_at)s,
                %(encrypted)s, %(key_id)s, %(wrapped_key)s, %(piece_size)s, %(store)s)
        RETURNING {COLUMNS}
        """,
        row,
    )


def file_by_id(conn: Conn, file_id: UUID) -> FileRow | None:
    """The row, or None; no lock."""
    with _rows(conn) as cur:
        return cur.execute(f"SELECT {COLUMNS} FROM files WHERE id = %s", (file_id,)).fetchone()


def listed(
    conn: Conn,
    uploader: UUID | None,
    purpose: str | None,
    state: str | None,
    with_retired: bool,
    after: tuple[datetime, UUID] | None,
    limit: int,
) -> list[FileRow]:
    """listFiles: live files newest first, after a keyset position (created_at, id); of one uploader, or of
    every uploader (None); by purpose and upload state when given; retired ones only `with_retired` (indexes
    files_by_uploader, files_listed)."""
    where = ["deleted_at IS NULL"]
    params: list[Any] = []
    if uploader is not None:
        where.append("uploaded_by = %s")
        params.append(uploader)
    if purpose is not None:
        where.append("purpose = %s")
        params.append(purpose)
    if state is not None:
        where.append("upload_state = %s")
        params.append(state)
    if not with_retired:
        where.append("retired_at IS NULL")
    if after is not None:
        where.append("(created_at, id) < (%s, %s)")
        params.extend(after)
    with _rows(conn) as cur:
        return cur.execute(
            f"SELECT {COLUMNS} FROM files WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %s",
            (*params, limit),
        ).fetchall()


def rows_after(conn: Conn, after_id: UUID, limit: int) -> list[FileRow]:
    """Rows in ascending id order after a file id, a page at a time (the audit's side of its merge)."""
    with _rows(conn) as cur:
        return cur.execute(
            f"SELECT {COLUMNS} FROM files WHERE id > %s ORDER BY id LIMIT %s", (after_id, limit)
        ).fetchall()


def files_by_ids(conn: Conn, file_ids: Sequence[UUID]) -> list[FileRow]:
    """The rows in ascending id order; no lock."""
    with _rows(conn) as cur:
        return cur.execute(f"SELECT {COLUMNS} FROM files WHERE id = ANY(%s) ORDER BY id", (list(file_ids),)).fetchall()


def lock_file(conn: Conn, file_id: UUID) -> FileRow | None:
    """The row locked FOR UPDATE, or None."""
    with _rows(conn) as cur:
        return cur.execute(f"SELECT {COLUMNS} FROM files WHERE id = %s FOR UPDATE", (file_id,)).fetchone()


def lock_files(conn: Conn, file_ids: Sequence[UUID]) -> list[FileRow]:
    """The rows locked FOR UPDATE in ascending id order (D10)."""
    with _rows(conn) as cur:
        return cur.execute(
            f"SELECT {COLUMNS} FROM files WHERE id = ANY(%s) ORDER BY id FOR UPDATE", (list(file_ids),)
        ).fetchall()


def set_complete(conn: Conn, file_id: UUID, sha256: str | None, detected_type: str | None, now: datetime) -> None:
    """The upload is assembled and verified: complete, with its digest (None: a direct upload whose digest the
    scan checks as it reads the bytes) and the type its first bytes show."""
    conn.execute(
        "UPDATE files SET upload_state = 'complete', sha256 = %s, detected_type = %s, completed_at = %s, "
        "last_change_at = greatest(last_change_at, %s) WHERE id = %s",
        (sha256, detected_type, now, now, file_id),
    )


def set_sha256(conn: Conn, file_id: UUID, sha256: str) -> None:
    """The digest of a complete file, measured by its scan (a direct upload)."""
    conn.execute("UPDATE files SET sha256 = %s WHERE id = %s", (sha256, file_id))


def set_failed(conn: Conn, file_id: UUID, changed_at: datetime) -> None:
    """The upload failed (abort, mismatch, expiry): final and not deliverable."""
    conn.execute(
        "UPDATE files SET upload_state = 'failed', last_change_at = greatest(last_change_at, %s) WHERE id = %s",
        (changed_at, file_id),
    )


def set_scan_status(conn: Conn, file_id: UUID, status: str, now: datetime) -> None:
    """Record a scan outcome and when it was written."""
    conn.execute(
        "UPDATE files SET scan_status = %s, scanned_at = %s, last_change_at = greatest(last_change_at, %s) "
        "WHERE id = %s",
        (status, now, now, file_id),
    )


@dataclass(frozen=True)
class Marked:
    """What the mark of mark_deleted did: the files it marked now, the outbox row of their purge job (None
    when it marked none), the files it spared because an attachment names them (when asked to check), and
    the stored events it could not redact (D6: the caller fails the transaction)."""

    file_ids: list[UUID]
    outbox_id: int | None
    attached: set[UUID]
    unredactable: int
    journal_entry: tuple[UUID, UUID] | None = None  # (installation, entry id) of the mark's journal entry


_STORED = "e.resource_kind = 'file' AND e.resource_id IN (SELECT id FROM marked) AND e.redacted_at IS NULL"


def set_deleted(
    conn: Conn,
    file_ids: Sequence[UUID],
    now: datetime,
    via: str,
    job: tuple[str, str, datetime],
    check_attached: Sequence[UUID] | None = None,
    journal: bool = False,
) -> Marked:
    """The one statement that writes files.deleted_at (D5), with everything that commits with the mark, so
    that a deletion is one statement after its row locks:

    - only the files it marks now take the next steps, so a second call has no effect;
    - with `check_attached`, a file an attachment names is not marked, and the statement answers which of
      `check_attached` are attached: the caller locked the rows in an earlier statement, so this one's
      snapshot sees every attach that committed before (D10);
    - their open upload sessions become aborted (D5 step 2);
    - their stored events are redacted here (D6, db/redaction.py): every writer of a file's events holds
      the file's row lock, which the caller holds, so the snapshot sees them all; the count of events no
      rule can redact is answered, and the caller fails the transaction on it;
    - one outbox row carries their purge job (D9), `job` = (queue, actor, created_at); none when no file
      was marked;
    - with `journal`, one deletion-journal entry records the mark (app/lifecycle/journal.py writes it out after
      the commit); none when no file was marked.

    Called by app.lifecycle.deletion and nothing else."""
    queue_name, actor_name, created_at = job
    spare = (
        "AND NOT EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = files.id)" if check_attached is not None else ""
    )
    row = one(
        conn.execute(
            f"""
        WITH marked AS (
            UPDATE files SET deleted_at = %(now)s, deleted_via = %(via)s
            WHERE id = ANY(%(ids)s) AND deleted_at IS NULL {spare} RETURNING id
        ), aborted AS (
            UPDATE upload_sessions SET state = 'aborted'
            WHERE file_id IN (SELECT id FROM marked) AND state = 'open'
        ), redacted AS (
            -- An event no rule redacts is left as it was, counted, and the caller rolls the whole transaction
            -- back (D6). RETURNING sees the new payload: a redacted one is redactable again (D6's idempotence).
            UPDATE events e SET redacted_at = %(now)s, payload = CASE WHEN {redaction.redactable("e")}
                THEN {redaction.redacted_payload("e", "blanked")} ELSE e.payload END
            WHERE {_STORED}
            RETURNING {redaction.redactable("e")} AS redactable
        ), journaled AS (
            -- The mark's journal entry (kind file.marked; body as app/domain/journal.py's Entry.body()), when the
            -- journal asked for it: numbered and written out after the commit by the journal writer.
            INSERT INTO journal_pending (entry_id, kind, at, body)
            SELECT gen_random_uuid(), 'file.marked', %(now)s,
                   jsonb_build_object('files', jsonb_agg(id::text ORDER BY id), 'via', %(via)s::text)
            FROM marked WHERE %(journal)s HAVING count(*) > 0
            RETURNING entry_id, (SELECT installation_id FROM journal_state) AS installation_id
        ), job AS (
            INSERT INTO outbox (queue_name, actor_name, args, created_at, traceparent)
            SELECT %(queue)s, %(actor)s, jsonb_build_array(jsonb_agg(id::text ORDER BY id)), %(created_at)s,
                   %(traceparent)s
            FROM marked HAVING count(*) > 0
            RETURNING id
        )
        SELECT coalesce((SELECT array_agg(id ORDER BY id) FROM marked), '{{}}') AS marked,
               (SELECT id FROM job) AS outbox_id,
               ARRAY(SELECT file_id FROM attachments WHERE file_id = ANY(%(check)s)) AS attached,
               (SELECT count(*) FROM redacted WHERE NOT redactable) AS unredactable,
               (SELECT installation_id FROM journaled) AS journal_installation,
               (SELECT entry_id FROM journaled) AS journal_entry
        """,
            {
                "now": now,
                "via": via,
                "ids": list(file_ids),
                "queue": queue_name,
                "actor": actor_name,
                "created_at": created_at,
                "traceparent": tracing.traceparent(),
                "check": list(check_attached or ()),
                "blanked": Jsonb(BLANKED),
                "journal": journal,
            },
        )
    )
    entry = (row.journal_installation, row.journal_entry) if row.journal_entry is not None else None
    return Marked(
        file_ids=list(row.marked),
        outbox_id=row.outbox_id,
        attached=set(row.attached),
        unredactable=row.unredactable,
        journal_entry=entry,
    )


def purge_facts(conn: Conn, file_ids: Sequence[UUID]) -> list[PurgeFacts]:
    """The facts a purge plans from, for the files that have a row (no lock, no transaction)."""
    with conn.cursor(row_factory=class_row(PurgeFacts)) as cur:
        return cur.execute(
            """
            SELECT f.id AS file_id, true AS "exists", f.deleted_at, f.upload_state, f.scan_status, f.object_key,
                   s.state AS session_state, s.storage_upload_id, coalesce(s.part_count, 0) AS part_count, s.protocol,
                   f.encrypted, f.store,
                   ARRAY(SELECT c.store FROM store_copies c WHERE c.file_id = f.id ORDER BY c.store) AS copies
            FROM files f LEFT JOIN upload_sessions s ON s.file_id = f.id
            WHERE f.id = ANY(%s)
            """,
            (list(file_ids),),
        ).fetchall()


def delete_rows(
    conn: Conn, file_ids: Sequence[UUID], keys_deleted: dict[UUID, int], keys_locked: dict[UUID, int] | None = None
) -> list[RemovedRow]:
    """Remove files rows (sessions and parts go by ON DELETE CASCADE), answering what each removed row's
    receipt is made of (the Receipts subscriber writes it: app/lifecycle/ends.py)."""
    rows = conn.execute(
        "DELETE FROM files WHERE id = ANY(%s) RETURNING id, uploaded_by, coalesce(deleted_via, 'unknown') AS via, "
        "deleted_at, removal_begun_at, (SELECT count(*) FROM file_variants v WHERE v.file_id = files.id) AS variants, "
        "ARRAY[files.store] || ARRAY(SELECT c.store FROM store_copies c WHERE c.file_id = files.id "
        "AND c.store <> files.store ORDER BY c.store) AS stores",
        (list(file_ids),),
    ).fetchall()
    locked = keys_locked or {}
    return [
        RemovedRow(
            row.id,
            row.uploaded_by,
            row.via,
            row.deleted_at,
            row.removal_begun_at,
            keys_deleted.get(row.id, 0),
            row.variants,
            locked.get(row.id, 0),
            tuple(row.stores),
        )
        for row in rows
    ]


def set_objects_purged(conn: Conn, file_ids: Sequence[UUID], now: datetime) -> None:
    """A purge removed the objects of these final, not deliverable files: the catch-up need not come back
    (D8 d)."""
    conn.execute(
        "UPDATE files SET objects_purged_at = %s WHERE id = ANY(%s) AND deleted_at IS NULL", (now, list(file_ids))
    )


def sealing_in_use(conn: Conn) -> tuple[bool, bool]:
    """Whether the database holds any file, and whether any of them is sealed (an installation's setting as its
    rows show it: lethe dev keeps it)."""
    row = one(
        conn.execute(
            "SELECT EXISTS (SELECT 1 FROM files) AS holds, EXISTS (SELECT 1 FROM files WHERE encrypted) AS sealed"
        )
    )
    return bool(row.holds), bool(row.sealed)


def untyped(conn: Conn, after: UUID | None, limit: int) -> list[FileRow]:
    """Complete, deliverable, live files whose bytes' type was never read, in ascending id order after `after` (the
    cleanup's step p reads them); no lock."""
    with _rows(conn) as cur:
        return cur.execute(
            f"SELECT {COLUMNS} FROM files WHERE detected_type IS NULL AND upload_state = 'complete' "
            "AND deleted_at IS NULL AND scan_status IN ('clean', 'skipped') AND id > %s ORDER BY id LIMIT %s",
            (after or UUID(int=0), limit),
        ).fetchall()


def set_detected_type(conn: Conn, file_id: UUID, detected_type: str) -> FileRow | None:
    """Record the type a file's bytes show ('' : read, nothing recognised) when it is still unread and live;
    returns the row then (locked by the update), else None."""
    with _rows(conn) as cur:
        return cur.execute(
            f"UPDATE files SET detected_type = %s WHERE id = %s AND detected_type IS NULL AND deleted_at IS NULL "
            f"RETURNING {COLUMNS}",
            (detected_type, file_id),
        ).fetchone()


def set_stripped(conn: Conn, file_id: UUID, was: str, object_key: str, size_bytes: int, sha256: str, mode: str) -> bool:
    """Record the original a scan's first step stored without its metadata (or found without any), if the row
    still references the original it read (`was`) and is waiting for its scan; False when it no longer does
    (deleted, ended, or another run recorded it first)."""
    return (
        conn.execute(
            "UPDATE files SET object_key = %s, size_as_sent = CASE WHEN size_bytes <> %s THEN size_bytes END, "
            "size_bytes = %s, sha256 = %s, metadata_stripped = %s WHERE id = %s AND object_key = %s "
            "AND upload_state = 'complete' AND scan_status = 'pending' AND deleted_at IS NULL "
            "AND metadata_stripped IS NULL",
            (object_key, size_bytes, size_bytes, sha256, mode, file_id, was),
        ).rowcount
        == 1
    )
