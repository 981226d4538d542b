"""SQL of the explainer: everything the rules read of one file, in one statement (no lock, no transaction)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from app.db.conn import Conn, first_as
from app.db.keeps import ENDED, held


@dataclass(frozen=True)
class FileFacts:
    """What the explainer reads of one file that has a row: the one rule's facts and the cleanup's."""

    file_id: UUID
    uploaded_by: UUID
    purpose: str
    upload_state: str
    scan_status: str
    variants_state: str | None
    created_at: datetime
    last_change_at: datetime
    deleted_at: datetime | None
    removal_begun_at: datetime | None
    objects_purged_at: datetime | None
    retired_at: datetime | None
    store: str
    held: bool
    in_own_draft: bool
    ended: bool
    session_state: str | None = None
    session_expires_at: datetime | None = None
    messages: list[str] = field(default_factory=list)  # the message ids attaching it
    slots: list[str] = field(default_factory=list)  # the slot kinds keeping it
    hold_ids: list[UUID] = field(default_factory=list)
    hold_refs: list[str] = field(default_factory=list)
    purge_error: str | None = None
    purge_next_attempt_at: datetime | None = None
    copies: list[str] = field(default_factory=list)  # other stores holding a copy (a migration's)


def file_facts(conn: Conn, file_id: UUID) -> FileFacts | None:
    """The facts of one file, or None when it has no row."""
    return first_as(
        conn,
        FileFacts,
        f"""
        SELECT f.id AS file_id, f.uploaded_by, f.purpose, f.upload_state, f.scan_status, f.variants_state,
               f.created_at, f.last_change_at, f.deleted_at, f.removal_begun_at, f.objects_purged_at, f.retired_at,
               f.store, {held("f")} AS held,
               EXISTS (SELECT 1 FROM drafts d WHERE d.user_id = f.uploaded_by AND f.id = ANY(d.file_ids))
                   AS in_own_draft,
               {ENDED} AS ended,
               s.state AS session_state, s.expires_at AS session_expires_at,
               ARRAY(SELECT a.message_id FROM attachments a WHERE a.file_id = f.id ORDER BY 1) AS messages,
               ARRAY(SELECT sl.kind FROM slots sl WHERE sl.file_id = f.id ORDER BY 1) AS slots,
               ARRAY(SELECT h.id FROM legal_holds h WHERE h.released_at IS NULL
                     AND (h.file_id = f.id OR h.subject_id = f.uploaded_by) ORDER BY h.created_at, h.id) AS hold_ids,
               ARRAY(SELECT h.case_ref FROM legal_holds h WHERE h.released_at IS NULL
                     AND (h.file_id = f.id OR h.subject_id = f.uploaded_by) ORDER BY h.created_at, h.id)
                   AS hold_refs,
               p.error_code AS purge_error, p.next_attempt_at AS purge_next_attempt_at,
               ARRAY(SELECT c.store FROM store_copies c WHERE c.file_id = f.id ORDER BY 1) AS copies
        FROM files f
        LEFT JOIN upload_sessions s ON s.file_id = f.id
        LEFT JOIN purge_failures p ON p.file_id = f.id
        WHERE f.id = %s
        """,
        (file_id,),
    )


def held_by_id(conn: Conn, file_id: UUID) -> list[tuple[UUID, str]]:
    """Active holds on a file id without a row (placed again by a restore, or before its upload)."""
    rows = conn.execute(
        "SELECT id, case_ref FROM legal_holds WHERE file_id = %s AND released_at IS NULL ORDER BY created_at, id",
        (file_id,),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


@dataclass(frozen=True)
class SubjectFacts:
    """What Lethe holds of one person, counted by rule (ids of holds only; never a name)."""

    files_live: int
    bytes_live: int
    files_attached: int
    files_in_drafts: int
    files_deleted_waiting: int
    files_ended_rows: int
    files_held: int
    drafts: int
    messages: int
    events: int
    hold_ids: list[UUID] = field(default_factory=list)
    hold_refs: list[str] = field(default_factory=list)


def subject_facts(conn: Conn, subject_id: UUID) -> SubjectFacts:
    """Counts of what a person uploaded, wrote and is told, through the indexes by person."""
    row = first_as(
        conn,
        SubjectFacts,
        f"""
        WITH mine AS (SELECT f.* FROM files f WHERE f.uploaded_by = %(subject)s)
        SELECT count(*) FILTER (WHERE f.deleted_at IS NULL AND NOT {ENDED}) AS files_live,
               coalesce(sum(f.size_bytes) FILTER (WHERE f.deleted_at IS NULL AND NOT {ENDED}), 0)::bigint
                   AS bytes_live,
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM attachments a WHERE a.file_id = f.id)) AS files_attached,
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM drafts d WHERE d.user_id = f.uploaded_by
                                               AND f.id = ANY(d.file_ids))) AS files_in_drafts,
               count(*) FILTER (WHERE f.deleted_at IS NOT NULL) AS files_deleted_waiting,
               count(*) FILTER (WHERE f.deleted_at IS NULL AND {ENDED}) AS files_ended_rows,
               count(*) FILTER (WHERE {held("f")}) AS files_held,
               (SELECT count(*) FROM drafts d WHERE d.user_id = %(subject)s) AS drafts,
               (SELECT count(*) FROM messages m WHERE m.author_id = %(subject)s AND m.deleted_at IS NULL) AS messages,
               (SELECT count(*) FROM events e WHERE e.audience_principal_id = %(subject)s) AS events,
               ARRAY(SELECT h.id FROM legal_holds h WHERE h.subject_id = %(subject)s AND h.released_at IS NULL
                     ORDER BY h.created_at, h.id) AS hold_ids,
               ARRAY(SELECT h.case_ref FROM legal_holds h WHERE h.subject_id = %(subject)s AND h.released_at IS NULL
                     ORDER BY h.created_at, h.id) AS hold_refs
        FROM mine f
        """,
        {"subject": subject_id},
    )
    assert row is not None
    return row
