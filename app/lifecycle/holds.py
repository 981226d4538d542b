# A legal hold suspends the removal of every byte of the files it covers (a file, or every file of an
# uploader) without lying to users: their deletions answer as always, the file disappears for every reader
# and its events are redacted; only its objects and row wait. Every removal asks the one rule for bytes right
# before it removes anything (app/domain/ends.py), and placing a hold waits for the removals being cleared and
# holds new ones back, so what a hold could not keep (its removal had begun) is counted and said (files_lost),
# never reported as kept. An erasure of a held person is refused. A release enqueues the purge of every file it
# freed (one job per batch) in its own transaction, so they go within one cleanup interval, and their receipts
# record the deferral. Events carry ids and counts only (D15): never the subject, never the case reference.
"""Legal holds (D19): place, read, list and release."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from app.db import files as files_sql
from app.db import holds as sql
from app.db import keeps as keeps_sql
from app.db.holds import HoldRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.holds import valid_case_ref
from app.domain.journal import HOLD_PLACED as JOURNAL_HOLD_PLACED
from app.domain.journal import HOLD_RELEASED as JOURNAL_HOLD_RELEASED
from app.domain.webhooks import HOLD_PLACED, HOLD_RELEASED
from app.errors import Forbidden, Invalid, NotFound
from app.lifecycle import journal, webhooks
from app.platform.jobs import enqueue_purge
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.holds")


def _manager(principal: Principal | None) -> None:
    if not access.may_hold(principal):
        raise Forbidden("manage")


def place_hold(
    rt: Runtime,
    principal: Principal | None,
    case_ref: str,
    subject_id: uuid.UUID | None = None,
    file_id: uuid.UUID | None = None,
) -> Any:
    """Place a hold on a subject (every file they uploaded, now and later) or on one file (`manage`; principal
    None: an operator's command).

    Raises:
        Forbidden: not `manage`.
        Invalid(case_ref_invalid | hold_target): a case reference that is not a token, or not exactly one target.
        NotFound: a file hold on a file with no row (never uploaded, or purged already).
    """
    _manager(principal)
    if not valid_case_ref(case_ref, rt.lifecycle.case_ref_pattern):
        raise Invalid(
            "case_ref_invalid", "A case reference is an opaque ticket number (holds.case_ref_pattern), never a name."
        )
    if (subject_id is None) == (file_id is None):
        raise Invalid("hold_target")
    hold_id = uuid.uuid4()

    def work(uow: UnitOfWork) -> HoldRow:
        if file_id is not None and files_sql.file_by_id(uow.conn, file_id) is None:
            raise NotFound()
        keeps_sql.lock_against_removals(uow.conn)  # the removals being cleared are counted, none begins meanwhile
        sql.insert(uow.conn, hold_id, subject_id, file_id, case_ref, rt.clock.now())
        row = sql.hold(uow.conn, hold_id)
        assert row is not None  # inserted just above
        webhooks.record_event(uow, rt.cfg, HOLD_PLACED, _event_data(row), row.created_at)
        journal.record_hold(uow, rt.cfg, JOURNAL_HOLD_PLACED, hold_id, row.created_at, subject_id, file_id, case_ref)
        return row

    row = rt.db.unit_of_work(work, name="hold.place")
    log_event(
        log,
        "info",
        "hold.placed",
        "legal hold placed",
        hold_id=str(row.id),
        target="file" if file_id is not None else "subject",
        files_deferred=row.files_deferred,
        files_lost=row.files_lost,
    )
    if row.files_lost:
        log_event(
            log,
            "warning",
            "hold.too_late",
            "the removal of some files the hold covers had begun before it was placed; their bytes could not be kept",
            hold_id=str(row.id),
            files=row.files_lost,
        )
    return row


def _event_data(row: Any) -> dict[str, Any]:
    """A hold's webhook data: its id, the kind of target, a file id for a file hold, times and counts;
    never the subject and never the case reference."""
    data: dict[str, Any] = {
        "hold_id": str(row.id),
        "target": "file" if row.file_id else "subject",
        "placed_at": row.created_at.isoformat(),
        "files_deferred": row.files_deferred,
        "files_lost": row.files_lost,
    }
    if row.file_id:
        data["file_id"] = str(row.file_id)
    if row.released_at:
        data["released_at"] = row.released_at.isoformat()
    return data


def hold_of(rt: Runtime, principal: Principal | None, hold_id: uuid.UUID) -> Any:
    """The hold, active or released (a released one is kept for privacy.receipt_ttl)."""
    _manager(principal)
    row = rt.db.read(lambda conn: sql.hold(conn, hold_id))
    if row is None:
        raise NotFound()
    return row


def list_holds(rt: Runtime, principal: Principal | None, after: uuid.UUID | None, limit: int) -> list[Any]:
    """Holds in the order they were placed, after the hold `after` (a cursor: the last id seen)."""
    _manager(principal)
    return rt.db.read(lambda conn: sql.page(conn, after, limit))


def release_hold(rt: Runtime, principal: Principal | None, hold_id: uuid.UUID) -> tuple[Any, int]:
    """Release a hold and, in the same transaction, enqueue the purge of every file it covered that no other
    hold covers (a job per file.gc_batch_size files). Releasing a released hold changes nothing.

    Returns:
        (the hold, how many files this release sent to the purge).

    Raises:
        Forbidden, NotFound.
    """
    _manager(principal)
    batch = rt.lifecycle.batch_size

    def work(uow: UnitOfWork) -> tuple[HoldRow, int]:
        row = sql.release(uow.conn, hold_id, rt.clock.now())
        if row is None:
            existing = sql.hold(uow.conn, hold_id)
            if existing is None:
                raise NotFound()
            return existing, -1
        freed, after = 0, uuid.UUID(int=0)
        while True:
            ids = sql.freed(uow.conn, hold_id, after, batch)
            enqueue_purge(uow, ids)
            freed += len(ids)
            if len(ids) < batch:
                break
            after = ids[-1]
        webhooks.record_event(
            uow, rt.cfg, HOLD_RELEASED, {**_event_data(row), "files_freed": freed}, row.released_at or rt.clock.now()
        )
        journal.record_hold(uow, rt.cfg, JOURNAL_HOLD_RELEASED, hold_id, row.released_at or rt.clock.now())
        return row, freed

    row, freed = rt.db.unit_of_work(work, name="hold.release")
    if freed >= 0:
        log_event(
            log,
            "info",
            "hold.released",
            "legal hold released; the files it alone held are sent to the purge",
            hold_id=str(row.id),
            files_deferred=row.files_deferred,
            files_freed=freed,
        )
    return row, max(freed, 0)
