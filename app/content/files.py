"""Reading files (D13, D16): a file is visible to its uploader and to `manage`; a deleted file is the same
404 as an unknown id; a retired file answers 410 file_expired to its uploader and 404 to anyone else. The
listing of a caller's files is here too; serving their content is app/content/serve.py."""

from __future__ import annotations

import base64
import struct
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from app.db import files as files_sql
from app.db.files import FileRow
from app.domain import access
from app.domain.access import Principal
from app.errors import Forbidden, Gone, Invalid, NotFound

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime


def visible_file(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> FileRow:
    """The live file row if the caller may see it, else NotFound; Forbidden when visible without files:read."""
    row = rt.db.read(lambda conn: files_sql.file_by_id(conn, file_id))
    if row is None or row.deleted_at is not None:
        raise NotFound()
    if not access.sees_file(principal, row.uploaded_by):
        raise NotFound()
    if row.retired_at is not None:
        # D16: retired by a retention policy. Its uploader learns it expired; to everyone else, managers
        # included, it is the same 404 as an unknown id (a manager restores it by id, without reading it).
        if access.sees_retired_file(principal, row.uploaded_by):
            raise Gone("file_expired", "The file expired under a retention policy.")
        raise NotFound()
    if not access.may_read(principal):
        raise Forbidden("files:read")
    return row


def _cursor_of(row: FileRow) -> str:
    micros = int(row.created_at.timestamp() * 1_000_000)
    return base64.urlsafe_b64encode(struct.pack(">q", micros) + row.id.bytes).rstrip(b"=").decode()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LOWEST = (datetime(1, 1, 2, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_HIGHEST = (datetime(9999, 12, 30, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def _position(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if len(raw) != 24:
            raise ValueError
        (micros,) = struct.unpack(">q", raw[:8])
        # Any position is a position: one past the times a datetime holds is that end of the range.
        micros = min(max(micros, _LOWEST), _HIGHEST)
        return _EPOCH + timedelta(microseconds=micros), uuid.UUID(bytes=raw[8:])
    except (ValueError, TypeError, OverflowError, OSError):
        raise Invalid("cursor_invalid", "Pass back the `next` of the previous page, as it was.") from None


def list_files(
    rt: Runtime,
    principal: Principal,
    uploader: uuid.UUID | None = None,
    purpose: str | None = None,
    state: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[FileRow], str | None]:
    """listFiles: the caller's own live files, newest first (with `manage`, any uploader's, retired ones too).

    Returns:
        (a page of rows, the cursor of the next page or None at the end).

    Raises:
        Forbidden: no files:read, or another uploader's files without `manage`. Invalid: `cursor_invalid`.
    """
    if not access.may_read(principal):
        raise Forbidden("files:read")
    manager = access.is_manager(principal)
    whose = uploader or principal.id
    if whose != principal.id and not manager:
        raise Forbidden("manage")
    after = _position(cursor) if cursor else None
    rows = rt.db.read(lambda conn: files_sql.listed(conn, whose, purpose, state, manager, after, limit + 1))
    page = rows[:limit]
    return page, _cursor_of(page[-1]) if len(rows) > limit else None
