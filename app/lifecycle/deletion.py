# Deletion is where a file stops existing for every reader. mark_deleted is the only code that sets
# files.deleted_at (D5); it runs inside the caller's unit of work after the caller locked the files rows in
# ascending id order (D10), redacts the file's stored events (D6), and commits the purge job with the mark
# (D9): mark, redaction and job commit together, and a rollback leaves none of them. No event is written
# for the deletion itself.
"""The one deletion function and its callers: deleteFile (D12) and the delete of a message (D13)."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Sequence

from app.platform.observability import metrics
from app.domain.access import Principal
from app.db import events as events_sql
from app.db import files as files_sql
from app.db import messages as messages_sql
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.redaction import redact_file_event
from app.errors import Conflict, Forbidden, NotFound
from app.platform.jobs import enqueue_purge
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (issue 22: typed at every service boundary)
    from app.platform.runtime import Runtime

log = logging.getLogger("lethe.deletion")


def mark_deleted(uow: UnitOfWork, file_ids: Sequence[uuid.UUID], now: datetime, via: str) -> list[uuid.UUID]:
    """Mark files deleted in the caller's transaction (D5).

    Args:
        uow: the caller's unit of work; the caller has locked the files rows (ascending id).
        file_ids: the files to delete.
        now: the time of the mark.
        via: what deleted them (`file`, `message`, `cleanup_unattached`, `cleanup_failed`, `retention`,
            `slot`, `erasure`, ...): kept on the row for its receipt (D16), and the metric's label.

    Returns:
        The files marked now; files already deleted take no further step.

    Raises:
        RedactionError: a stored event on kind `file` that cannot be redacted; the transaction fails.
    """
    marked = files_sql.set_deleted(uow.conn, file_ids, now, via)  # and aborts their open sessions
    if not marked:
        return []
    stored = events_sql.lock_unredacted_file_events(uow.conn, marked)
    redacted = [(event.id, redact_file_event(event.type, event.schema_version, event.payload)) for event in stored]
    events_sql.set_redacted(uow.conn, redacted, now)
    enqueue_purge(uow, marked)
    uow.after_commit_metric(lambda: metrics.FILES_DELETED.labels(via).inc(len(marked)))
    return marked


def delete_file(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """deleteFile (D12): the answer table, in its order."""

    def work(uow):
        row = files_sql.lock_file(uow.conn, file_id)
        if row is None:
            raise NotFound()
        if row.deleted_at is not None:
            if access.sees_deleted_file(principal, row.uploaded_by):
                return False  # already deleted: 204 to its uploader, the same 404 to anyone else
            raise NotFound()
        if not access.sees_file(principal, row.uploaded_by):
            raise NotFound()
        if not access.may_write(principal):
            raise Forbidden()
        # D10: the attachment is checked after the file row's lock, so a concurrent attach either came
        # first (409 here) or will see deleted_at after its own lock.
        if files_sql.is_attached(uow.conn, file_id):
            raise Conflict("file_attached", "Delete the message instead.")
        if row.purpose != "attachment":
            raise Conflict("purpose_not_deletable")
        return bool(mark_deleted(uow, [file_id], rt.clock.now(), via="file"))

    if rt.db.unit_of_work(work, name="file.delete"):
        log_event(log, "info", "file.deleted", "file deleted", file_id=str(file_id))


def delete_message(rt: Runtime, principal: Principal, message_id: str, author_id: uuid.UUID | None = None) -> None:
    """Delete a message: its attachments go and every attached file is marked deleted, in one transaction
    (lock order D10: message, files ascending, attachments). Message ids are scoped by author: the caller's
    own message, or with `manage` the message of `author_id`.
    """
    author = author_id or principal.id
    if not access.sees_message(principal, author):
        raise NotFound()  # the same 404 as an unknown id: nobody probes another's ids

    def work(uow):
        message = messages_sql.lock_message(uow.conn, author, message_id)
        if message is None:
            raise NotFound()
        if not access.may_write(principal):
            raise Forbidden()
        if message.deleted_at is not None:
            return []
        file_ids = messages_sql.attached_file_ids(uow.conn, author, message_id)
        files_sql.lock_files(uow.conn, file_ids)
        messages_sql.delete_attachments(uow.conn, author, message_id)
        now = rt.clock.now()
        messages_sql.set_message_deleted(uow.conn, author, message_id, now)
        return mark_deleted(uow, file_ids, now, via="message")

    marked = rt.db.unit_of_work(work, name="message.delete")
    log_event(log, "info", "message.deleted", "message deleted", files=len(marked))
