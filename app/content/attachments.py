"""Attaching files to messages (D13, D10).

A message is recorded with the caller as author; message ids are scoped by author, so one user's id never
meets another's. Each file must be the caller's, deliverable, not deleted
nor retired (D16), and not attached elsewhere, else 409 file_not_attachable and nothing is attached. Locks: the message, then
the files in ascending id order (D10); the deleting side locks the file row too, so a file ends attached or
deleted, never both.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.db import files as files_sql
from app.db import messages as sql
from app.db.messages import MessageRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.states import is_deliverable
from app.errors import Conflict, Forbidden, Invalid
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.attachments")


def put_message(
    rt: Runtime, principal: Principal, message_id: str, file_ids: Sequence[uuid.UUID]
) -> tuple[MessageRow, list[uuid.UUID]]:
    """Record the message (if new) and attach the files.

    Returns:
        (message row, every attached file id).
    """
    if not access.may_write(principal):
        raise Forbidden("files:write")
    wanted = sorted(set(file_ids))
    now = rt.clock.now()

    def attach(uow: UnitOfWork) -> tuple[MessageRow, list[uuid.UUID]]:
        # Ids are scoped by author: this is always the caller's own message, never another's (D13).
        sql.ensure_message(uow.conn, principal.id, message_id, now)
        message = sql.lock_message(uow.conn, principal.id, message_id)
        assert message is not None  # ensured just above
        if message.deleted_at is not None:
            # The caller's own id (ids are scoped by author): say why, rather than a bare 404.
            raise Conflict("message_deleted", "This message was deleted; use a new message id.")
        already = set(sql.attached_file_ids(uow.conn, principal.id, message_id))
        new_ids = [file_id for file_id in wanted if file_id not in already]
        if len(already) + len(new_ids) > rt.limits.max_attachments:
            raise Invalid("too_many_attachments")
        rows = {row.id: row for row in files_sql.lock_files(uow.conn, new_ids)}
        attached_elsewhere = sql.attachments_of_files(uow.conn, new_ids)
        for file_id in new_ids:
            row = rows.get(file_id)
            if (
                row is None
                or row.deleted_at is not None
                or row.retired_at is not None
                or not access.may_attach(principal, row.uploaded_by)
                or row.purpose != "attachment"
                or not is_deliverable(row.upload_state, row.scan_status)
                or file_id in attached_elsewhere
            ):
                raise Conflict("file_not_attachable")
        sql.insert_attachments(uow.conn, principal.id, message_id, new_ids, now)
        return message, sql.attached_file_ids(uow.conn, principal.id, message_id)

    message, attached = rt.db.unit_of_work(attach, name="message.attach")
    log_event(log, "info", "message.attached", "files attached", count=len(attached))
    return message, attached
