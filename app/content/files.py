"""Reading files (D13, D16): a file is visible to its uploader and to `manage`; a deleted file is the same
404 as an unknown id; a retired file answers 410 file_expired to its uploader and 404 to anyone else. Content is served only for a deliverable file; a visible deliverable file whose
object is gone answers 410, never a 500."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any, Generator

from app.domain.access import Principal
from app.db import files as files_sql
from app.db.files import FileRow
from app.domain import access
from app.domain.states import is_deliverable
from app.errors import Forbidden, Gone, NotFound
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.files")


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


def open_content(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> tuple[FileRow, int, Generator[bytes, None, None]]:
    """The row, the object's size and a stream of the original of a deliverable file. The size is the row's:
    completion verified that the object has exactly that size, and an original is never rewritten.

    Raises:
        NotFound: not visible, or not deliverable. Gone: deliverable but its object is missing.
    """
    row = visible_file(rt, principal, file_id)
    if not is_deliverable(row.upload_state, row.scan_status) or row.object_key is None:
        raise NotFound()
    try:
        chunks = rt.store.open(row.object_key)  # opens eagerly: a missing object raises here
    except NotFound:
        log_event(log, "warning", "file.content_missing", "content missing", file_id=str(file_id))
        raise Gone("content_missing") from None
    return row, row.size_bytes, chunks
