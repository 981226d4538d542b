# Deletion is where a file stops existing for every reader. mark_deleted is the only code that sets
# files.deleted_at (D5); it runs inside the caller's unit of work after the caller locked the files rows in
# ascending id order (D10), redacts the file's stored events (D6), and commits the purge job with the mark
# (D9): mark, redaction and job commit together, and a rollback leaves none of them. No event is written
# for the deletion itself.
"""The one deletion function and its callers: deleteFile (D12) and the delete of a message (D13)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from app.db import files as files_sql
from app.db import messages as messages_sql
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import FilesMarked
from app.domain.redaction import RedactionError
from app.errors import Conflict, Forbidden, NotFound
from app.lifecycle import ends
from app.platform.jobs import PURGE_ACTOR, PURGE_QUEUE
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.deletion")


def mark_deleted(uow: UnitOfWork, file_ids: Sequence[uuid.UUID], now: datetime, via: str) -> list[uuid.UUID]:
    """Mark files deleted in the caller's transaction (D5).

    Args:
        uow: the caller's unit of work; the caller has locked the files rows (ascending id).
        file_ids: the files to delete.
        now: the time of the mark.
        via: what deleted them (`file`, `manager` (deleteFile by `manage` of another's file), `message`,
            `cleanup_unattached`, `cleanup_failed`, `retention`, `slot`, `erasure`, ...): kept on the row for
            its receipt (D16), and the metric's label.

    Returns:
        The files marked now; files already deleted take no further step.

    Raises:
        RedactionError: a stored event on kind `file` that cannot be redacted; the transaction fails.
    """
    return _mark(uow, file_ids, now, via).file_ids


def _mark(
    uow: UnitOfWork,
    file_ids: Sequence[uuid.UUID],
    now: datetime,
    via: str,
    check_attached: Sequence[uuid.UUID] | None = None,
) -> files_sql.Marked:
    """mark_deleted's one statement (mark, sessions, redaction, outbox row, journal entry), and what it did; with
    `check_attached`, an attached file is spared and the answer says which of those ids are attached."""
    if not file_ids and not check_attached:  # nothing to mark nor to check (an unknown or foreign id)
        return files_sql.Marked(file_ids=[], outbox_id=None, attached=set(), unredactable=0)
    marked = files_sql.set_deleted(
        uow.conn,
        file_ids,
        now,
        via,
        (PURGE_QUEUE, PURGE_ACTOR, uow.clock.now()),
        check_attached,
        journal=ends.journals_marks(uow),
    )
    if marked.unredactable:
        raise RedactionError("no redaction rule for a stored event of a file being deleted")  # D6
    if marked.outbox_id is not None:
        uow.enqueued(marked.outbox_id, PURGE_QUEUE, PURGE_ACTOR, [str(file_id) for file_id in marked.file_ids])
        ends.files_marked(uow, FilesMarked(tuple(marked.file_ids), via, now, marked.journal_entry))
    return marked


@dataclass(frozen=True)
class DeleteResult:
    """What deleteFile answers for one id of a batch: 204, 404 or 409 with its reason."""

    id: uuid.UUID
    status: int
    reason: str | None = None


_REFUSALS = {"not_found": NotFound, "forbidden": Forbidden}


def _delete_locked(
    uow: UnitOfWork, principal: Principal, file_ids: Sequence[uuid.UUID], now: datetime
) -> dict[uuid.UUID, str]:
    """The answer for each id (D12's table) and the mark of those to delete, under the rows' locks: two
    statements between BEGIN and COMMIT. The first locks the rows; the second, whose snapshot is taken
    after the locks were granted, checks the attachments and marks in one (D10: an attach that held a row
    first is seen, and its file is spared)."""
    rows = files_sql.lock_files(uow.conn, sorted(set(file_ids)))  # D10: ascending id
    answers = {file_id: "not_found" for file_id in file_ids}
    for row in rows:
        answers[row.id] = access.delete_answer(
            principal, row.uploaded_by, row.deleted_at is not None, False, row.purpose
        )
    # Every visible, writable, live file: its answer may still become file_attached (the check comes
    # before the purpose in D12's order); those answering delete so far are the ones to mark.
    live = [row for row in rows if answers[row.id] in ("delete", "purpose_not_deletable")]
    attached: set[uuid.UUID] = set()
    # A manager deleting someone else's file is recorded as such (the receipt's `via`, never who).
    for via, group in (
        ("file", [row for row in live if row.uploaded_by == principal.id]),
        ("manager", [row for row in live if row.uploaded_by != principal.id]),
    ):
        if group:
            attached |= _mark(
                uow,
                [row.id for row in group if answers[row.id] == "delete"],
                now,
                via,
                check_attached=[row.id for row in group],
            ).attached
    for row in live:
        answers[row.id] = access.delete_answer(principal, row.uploaded_by, False, row.id in attached, row.purpose)
    return answers


def delete_file(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """deleteFile (D12): the answer table, in its order (domain.access.delete_answer)."""
    # D10: the attachment is checked after the file row's lock, so a concurrent attach either came first
    # (409 here) or will see deleted_at after its own lock.
    answer = rt.db.unit_of_work(
        lambda uow: _delete_locked(uow, principal, [file_id], rt.clock.now())[file_id], name="file.delete"
    )
    if answer == "forbidden":
        raise Forbidden("files:write")  # visible, not allowed: the scope the token lacks (D12)
    if answer in _REFUSALS:
        raise _REFUSALS[answer]()
    if answer in ("file_attached", "purpose_not_deletable"):
        raise Conflict(answer, "Delete the message instead." if answer == "file_attached" else None)
    if answer == "delete":
        log_event(log, "info", "file.deleted", "file deleted", file_id=str(file_id))


def delete_files(rt: Runtime, principal: Principal, file_ids: Sequence[uuid.UUID]) -> list[DeleteResult]:
    """batchDeleteFiles: each id answered exactly as deleteFile would answer it alone, in request
    order; one transaction for the batch, rows locked in id order (D10), one purge job for what it marked.

    Raises:
        Forbidden: the caller may not write (`files:write`): the whole request is refused.
    """
    if not access.may_write(principal):
        raise Forbidden("files:write")
    answers = rt.db.unit_of_work(
        lambda uow: _delete_locked(uow, principal, file_ids, rt.clock.now()), name="file.batch_delete"
    )
    results = [DeleteResult(file_id, *_STATUS[answers[file_id]]) for file_id in file_ids]
    deleted = sum(1 for answer in answers.values() if answer == "delete")
    log_event(log, "info", "files.batch_deleted", "files deleted in a batch", files=deleted, ids=len(answers))
    return results


# The answer of one id in a batch, as deleteFile's status and reason (forbidden cannot occur: checked first).
_STATUS: dict[str, tuple[int, str | None]] = {
    "delete": (204, None),
    "not_found": (404, "not_found"),
    "file_attached": (409, "file_attached"),
    "purpose_not_deletable": (409, "purpose_not_deletable"),
}


def delete_message(rt: Runtime, principal: Principal, message_id: str, author_id: uuid.UUID | None = None) -> None:
    """Delete a message: its attachments go and every attached file is marked deleted, in one transaction
    (lock order D10: message, files ascending, attachments). Message ids are scoped by author: the caller's
    own message, or with `manage` the message of `author_id`.
    """
    author = author_id or principal.id
    if not access.sees_message(principal, author):
        raise NotFound()  # the same 404 as an unknown id: nobody probes another's ids

    def work(uow: UnitOfWork) -> list[uuid.UUID]:
        message = messages_sql.lock_message(uow.conn, author, message_id)
        if message is None:
            raise NotFound()
        if not access.may_write(principal):
            raise Forbidden("files:write")
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
