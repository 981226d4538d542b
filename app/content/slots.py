# A slot deletes the file it no longer keeps (D16; a deletion only on a real replacement): setting a different
# file, or clearing the slot, marks the file that leaves deleted (Runtime.delete_files, the one deletion) in the
# same transaction; setting the same file again deletes nothing. Lock order (D10): the slot row, then the files
# rows ascending, then what the deletion locks; two concurrent replaces serialize on the slot row, so every file
# that leaves is deleted exactly once and the file that ends in the slot never is.
"""Avatar and logo slots: set, clear, read."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from app.db import files as files_sql
from app.db import slots as sql
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.slots import refusal
from app.errors import Conflict, Forbidden, NotFound
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.slots")


def _holder(principal: Principal, kind: str, holder_id: uuid.UUID | None, write: bool) -> uuid.UUID:
    """Who holds the slot, after the access rules: an avatar is its principal's (or `manage`'s), the logo
    `manage`'s only."""
    if not access.may_use_slot(principal, kind, holder_id, write):
        needs_manage = kind == "logo" or (holder_id != principal.id and not access.is_manager(principal))
        raise Forbidden("manage" if needs_manage else "files:write" if write else "files:read")
    if kind == "logo":
        return sql.LOGO_HOLDER
    assert holder_id is not None
    return holder_id


def set_slot(
    rt: Runtime, principal: Principal, kind: str, holder_id: uuid.UUID | None, file_id: uuid.UUID
) -> uuid.UUID:
    """Put a file into a slot and delete the file it replaces, in the same transaction.

    Returns:
        The file now in the slot.

    Raises:
        Forbidden: not the principal itself (with files:write) nor `manage`. Conflict: the file cannot go
            there (`file_not_available`, `wrong_purpose`, `file_not_deliverable`).
    """
    holder = _holder(principal, kind, holder_id, write=True)
    # The file must be the holder's own: a principal's avatar is theirs, the logo the calling manager's.
    owner = principal.id if kind == "logo" else holder

    def work(uow: UnitOfWork) -> uuid.UUID | None:
        now = rt.clock.now()
        current = sql.lock_slot(uow.conn, kind, holder, now)
        previous = current.file_id
        rows = {row.id: row for row in files_sql.lock_files(uow.conn, [i for i in {file_id, previous} if i])}
        reason = refusal(kind, rows.get(file_id), owner)
        if reason is not None:
            raise Conflict(reason)
        if previous == file_id:
            return None  # the same file again: nothing leaves, nothing is deleted
        sql.set_file(uow.conn, kind, holder, file_id, now)
        if previous is not None:
            rt.delete_files(uow, [previous], now, "slot")
        return previous

    released = rt.db.unit_of_work(work, name="slot.set")
    log_event(
        log,
        "info",
        "slot.set",
        "slot set",
        kind=kind,
        file_id=str(file_id),
        released=str(released) if released else None,
    )
    return file_id


def clear_slot(rt: Runtime, principal: Principal, kind: str, holder_id: uuid.UUID | None) -> None:
    """Empty a slot and delete the file it kept (nothing when it is empty)."""
    holder = _holder(principal, kind, holder_id, write=True)

    def work(uow: UnitOfWork) -> uuid.UUID | None:
        now = rt.clock.now()
        previous = sql.lock_slot(uow.conn, kind, holder, now).file_id
        if previous is None:
            return None
        files_sql.lock_files(uow.conn, [previous])
        sql.set_file(uow.conn, kind, holder, None, now)
        rt.delete_files(uow, [previous], now, "slot")
        return previous

    released = rt.db.unit_of_work(work, name="slot.clear")
    log_event(log, "info", "slot.cleared", "slot cleared", kind=kind, released=str(released) if released else None)


def slot_file(rt: Runtime, principal: Principal, kind: str, holder_id: uuid.UUID | None) -> uuid.UUID:
    """The file in a slot.

    Raises:
        NotFound: the slot is empty (reason `slot_empty`).
    """
    if kind == "logo":
        holder = sql.LOGO_HOLDER  # the logo is read by any authenticated caller with files:read
        if not access.may_read(principal):
            raise Forbidden("files:read")
    else:
        holder = _holder(principal, kind, holder_id, write=False)
    row = rt.db.read(lambda conn: sql.slot(conn, kind, holder))
    if row is None or row.file_id is None:
        raise NotFound()  # an empty slot
    return row.file_id
