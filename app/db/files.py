"""SQL of the files table (D3). One function per statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Sequence
from uuid import UUID

import psycopg

COLUMNS = ("id, uploaded_by, purpose, original_name, mime_type, size_bytes, sha256, scope_id, object_key, "
           "upload_state, scan_status, created_at, scanned_at, deleted_at, last_change_at")


def insert_file(conn: psycopg.Connection, row: dict[str, Any]) -> None:
    conn.execute(
        """
        INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, scope_id, object_key,
                           upload_state, scan_status, created_at, last_change_at)
        VALUES (%(id)s, %(uploaded_by)s, %(purpose)s, %(original_name)s, %(mime_type)s, %(size_bytes)s,
                %(scope_id)s, %(object_key)s, 'uploading', 'pending', %(created_at)s, %(created_at)s)
        """,
        row,
    )


def file_by_id(conn: psycopg.Connection, file_id: UUID):
    """The row, or None; no lock."""
    return conn.execute(f"SELECT {COLUMNS} FROM files WHERE id = %s", (file_id,)).fetchone()


def lock_file(conn: psycopg.Connection, file_id: UUID):
    """The row locked FOR UPDATE, or None."""
    return conn.execute(f"SELECT {COLUMNS} FROM files WHERE id = %s FOR UPDATE", (file_id,)).fetchone()


def lock_files(conn: psycopg.Connection, file_ids: Sequence[UUID]) -> list:
    """The rows locked FOR UPDATE in ascending id order (D10)."""
    return conn.execute(f"SELECT {COLUMNS} FROM files WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
                        (list(file_ids),)).fetchall()


def set_complete(conn: psycopg.Connection, file_id: UUID, sha256: str, now: datetime) -> None:
    conn.execute(
        "UPDATE files SET upload_state = 'complete', sha256 = %s, last_change_at = greatest(last_change_at, %s) "
        "WHERE id = %s", (sha256, now, file_id))


def set_failed(conn: psycopg.Connection, file_id: UUID, changed_at: datetime) -> None:
    conn.execute(
        "UPDATE files SET upload_state = 'failed', last_change_at = greatest(last_change_at, %s) WHERE id = %s",
        (changed_at, file_id))


def set_scan_status(conn: psycopg.Connection, file_id: UUID, status: str, now: datetime) -> None:
    conn.execute(
        "UPDATE files SET scan_status = %s, scanned_at = %s, last_change_at = greatest(last_change_at, %s) "
        "WHERE id = %s", (status, now, now, file_id))
