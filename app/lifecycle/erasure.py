# Erasure removes everything Lethe holds of a person (D16, GDPR article 17): their slots, messages, files
# (attached ones too), upload sessions, drafts and the events addressed to them or about their files. It
# works in rounds, each resumable and idempotent: mark (every file through mark_deleted, in batches, lock
# order slots, messages, files, attachments: D10), purge (inline, outside every transaction: K1), confirm
# (a read of the store for every key of every purged file), then complete only when no row of the subject is
# left and every key was confirmed absent. A complete erasure forgets its subject: what stays is its counts
# and the files' name-free receipts. A person a legal hold covers (a hold on them or on one of their files) is
# not erased: the request answers 409 subject_on_hold, and a running erasure meeting a new hold fails with that
# reason before it marks anything more; it can be requested again after the release.
"""Erasure of a person: request, one round, and its state."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from app.db import erasures as sql
from app.db import holds as holds_sql
from app.db import keeps as keeps_sql
from app.db import messages as messages_sql
from app.db import quotas as quotas_sql
from app.db import receipts as receipts_sql
from app.db import slots as slots_sql
from app.db.erasures import ErasedFile, ErasureRow
from app.db.files import lock_files
from app.db.locks import exclusive
from app.db.receipts import ReceiptRow
from app.db.slots import LOGO_HOLDER
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import Clearance, Reach
from app.domain.keys import KeySchemaError
from app.domain.objects import FileObjects
from app.domain.webhooks import ERASURE_COMPLETED
from app.errors import Conflict, Forbidden, Invalid, NotFound
from app.lifecycle import journal, webhooks
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.purge import purge_files
from app.platform import tracing
from app.platform.jobs import ERASE_ACTOR, ERASE_QUEUE
from app.platform.observability.logs import log_event
from app.storage.base import MultipartRef

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.erasure")


def _manager(principal: Principal | None) -> None:
    if not access.may_erase(principal):
        raise Forbidden("manage")


def request_erasure(rt: Runtime, principal: Principal | None, subject_id: uuid.UUID) -> ErasureRow:
    """Start erasing a subject (`manage`; principal None: an operator's command), or answer the erasure
    already running for them.

    Returns:
        The erasure's row.

    Raises:
        Forbidden: not `manage`.
        Conflict(subject_on_hold): a legal hold covers the subject or one of their files.
        Invalid(subject_reserved): the all-zero id, the installation's own (its logo slot).
    """
    _manager(principal)
    if subject_id == LOGO_HOLDER:
        # The all-zero id is no person: it holds the installation's logo slot, which an erasure would empty.
        raise Invalid("subject_reserved", "This id is reserved for the installation (its logo); it is no person.")
    new_id = uuid.uuid4()

    def work(uow: UnitOfWork) -> ErasureRow:
        if holds_sql.subject_on_hold(uow.conn, subject_id):
            raise Conflict("subject_on_hold")  # GDPR 17(3)(e): kept for legal claims until the release
        row = sql.start(uow.conn, new_id, subject_id, rt.clock.now())
        if row.id == new_id:
            uow.enqueue(ERASE_QUEUE, ERASE_ACTOR, str(new_id))
        return row

    row = rt.db.unit_of_work(work, name="erasure.request")
    log_event(log, "info", "erasure.requested", "erasure requested", erasure_id=str(row.id), new=row.id == new_id)
    return row


def erasure_of(rt: Runtime, principal: Principal | None, erasure_id: uuid.UUID) -> tuple[ErasureRow, list[ReceiptRow]]:
    """The erasure and the receipts of its files."""
    _manager(principal)
    row = rt.db.read(lambda conn: sql.erasure(conn, erasure_id))
    if row is None:
        raise NotFound()
    receipts = rt.db.read(lambda conn: receipts_sql.receipts_of(conn, sql.file_ids_of(conn, erasure_id)))
    return row, receipts


def erase_round(rt: Runtime, erasure_id: uuid.UUID) -> str:
    """One round: mark, purge, confirm, and complete when nothing is left (a span `erasure.round` with its
    counts). See _erase_round."""
    with tracing.span("erasure.round", erasure_id=erasure_id):
        state = _erase_round(rt, erasure_id)
        row = rt.db.read(lambda conn: sql.erasure(conn, erasure_id))
        if row is not None:
            tracing.count(
                state=state,
                files_marked=row.files_marked,
                files_purged=row.files_purged,
                keys_confirmed_absent=row.keys_confirmed_absent,
                messages_removed=row.messages_removed,
                drafts_removed=row.drafts_removed,
            )
        return state


def _erase_round(rt: Runtime, erasure_id: uuid.UUID) -> str:
    """One round: mark, purge, confirm, and complete when nothing is left.

    One runner at a time (D19): the actor, cleanup step i and `lethe erase --wait` may all call it; while one
    is in a round, the others return `running` at once and do nothing, so every count is counted once.

    Returns:
        The state after the round: `running` (another round is needed, or another runner is in one),
        `complete` or `failed`.

    Raises:
        StorageError: the store failed; the next round goes on from where this one stopped.
    """
    with rt.db.maintenance(), exclusive(rt.db, f"erasure:{erasure_id}") as mine:
        row = rt.db.read(lambda conn: sql.erasure(conn, erasure_id))
        if row is None:
            raise NotFound()
        if row.state != "running" or not mine:
            return str(row.state)  # ended, or another runner is in a round of it now (D19)
        subject, batch = row.subject_id, rt.lifecycle.batch_size
        assert subject is not None  # a running erasure names its subject (a complete one forgets it)
        if rt.db.read(lambda conn: holds_sql.subject_on_hold(conn, subject)):
            # A hold placed while the erasure ran: stop before marking more. What went before it is gone, and
            # is confirmed and counted first: the counts are the proof, whatever interrupts the round.
            _confirm(rt, erasure_id, batch)
            rt.db.unit_of_work(
                lambda uow: sql.finish(uow.conn, row.id, "failed", "subject_on_hold", rt.clock.now()),
                name="erasure.finish",
            )
            log_event(
                log,
                "warning",
                "erasure.failed",
                "a legal hold covers the subject; the erasure stops",
                erasure_id=str(row.id),
                reason="subject_on_hold",
            )
            return "failed"
        _mark(rt, erasure_id, subject, batch)
        _purge(rt, erasure_id, batch)
        _confirm(rt, erasure_id, batch)
        return _finish(rt, row, subject)


def _mark(rt: Runtime, erasure_id: uuid.UUID, subject: uuid.UUID, batch: int) -> None:
    def slots(uow: UnitOfWork) -> None:
        for slot in slots_sql.clear_holder(uow.conn, subject):
            if slot.holder_id == subject:
                slots_sql.delete_slot(uow.conn, slot.kind, slot.holder_id)  # the subject's own slot goes
            else:
                slots_sql.set_file(uow.conn, slot.kind, slot.holder_id, None, rt.clock.now())  # the logo empties

    rt.db.unit_of_work(slots, name="erasure.slots")
    # Files an earlier, failed erasure of the subject purged without confirming: read their keys again.
    rt.db.unit_of_work(lambda uow: sql.adopt_unconfirmed(uow.conn, erasure_id, subject), name="erasure.adopt")

    def messages(uow: UnitOfWork) -> int:
        found = sql.lock_messages_of(uow.conn, subject, batch)
        if not found:
            return 0
        ids = [message.id for message in found]
        file_ids = sql.files_of_messages(uow.conn, subject, ids)
        lock_files(uow.conn, file_ids)
        removed = sql.delete_messages(uow.conn, subject, ids)  # their attachment rows go with them
        marked = mark_deleted(uow, file_ids, rt.clock.now(), via="erasure")
        sql.add_counts(uow.conn, erasure_id, messages_removed=removed, files_marked=len(marked))
        return len(found)

    while rt.db.unit_of_work(messages, name="erasure.messages") == batch:
        pass

    after = uuid.UUID(int=0)
    while True:

        def files(uow: UnitOfWork) -> list[ErasedFile]:
            rows = sql.lock_files_of(uow.conn, subject, batch, after)
            if rows:
                sql.record_files(uow.conn, erasure_id, rows)
                ids = [r.id for r in rows]
                messages_sql.detach_files(uow.conn, ids)
                marked = mark_deleted(uow, [r.id for r in rows if r.deleted_at is None], rt.clock.now(), via="erasure")
                sql.add_counts(uow.conn, erasure_id, files_marked=len(marked))
            return rows

        rows = rt.db.unit_of_work(files, name="erasure.files")
        if len(rows) < batch:
            break
        after = rows[-1].id

    def rest(uow: UnitOfWork) -> None:
        drafts = sql.delete_drafts_of(uow.conn, subject)
        sql.forget_files_in_drafts(uow.conn, erasure_id)  # the subject's file ids in other people's drafts
        sql.forget_events_of(uow.conn, subject, erasure_id)
        sql.add_counts(uow.conn, erasure_id, drafts_removed=drafts)

    rt.db.unit_of_work(rest, name="erasure.rest")


def _purge(rt: Runtime, erasure_id: uuid.UUID, batch: int) -> None:
    after = uuid.UUID(int=0)
    while True:
        ids = rt.db.read(lambda conn: sql.deleted_files_of(conn, erasure_id, batch, after))
        if ids:
            purge_files(rt, ids)  # a refused file stays; the next round tries it again
        if len(ids) < batch:
            return
        after = ids[-1]


def _keys(rt: Runtime, file_id: uuid.UUID, object_key: str | None, part_count: int, store: str) -> list[str]:
    # The tail key is read for every file: one more head, and no column to trust.
    return rt.files.keys_of(FileObjects(file_id, object_key, part_count=part_count, store=store), with_tail=True)


def _uploads_left(rt: Runtime, cleared: Clearance, file_id: uuid.UUID, object_key: str | None, store: str) -> bool:
    """Whether a multipart upload of the file's original is still listed in a store (S3: a direct upload's part
    PUT in flight during the abort may have landed): then it is aborted again (as the one rule allows) and the
    file is not confirmed in this round."""
    if object_key is None or not rt.store_named(store).supports_direct:
        return False
    left = rt.store_named(store).uploads_of(object_key)
    rt.files.abort_uploads(
        cleared, {file_id: [MultipartRef(str(file_id), object_key, upload_id) for upload_id in left]}, store=store
    )
    if left:
        log_event(
            log,
            "warning",
            "erasure.upload_remains",
            "a purged file's multipart upload was still listed; aborted again",
            file_id=str(file_id),
            uploads=len(left),
        )
    return bool(left)


def _confirm(rt: Runtime, erasure_id: uuid.UUID, batch: int) -> None:
    after = uuid.UUID(int=0)
    while True:
        rows = rt.db.read(lambda conn: sql.unconfirmed_purged(conn, erasure_id, batch, after))
        # Their rows are gone; what a read finds left goes again as the one rule allows (a hold on the id).
        cleared = rt.db.unit_of_work(
            lambda uow: keeps_sql.clearance(uow, [row.file_id for row in rows], Reach.FILE, rt.clock.now()),
            name="erasure.clear",
        )
        absent: dict[uuid.UUID, int] = {}
        for row in rows:
            # The row is gone, and with it the names of the stores that held the file: every store is read.
            try:
                keys = {name: _keys(rt, row.file_id, row.object_key, row.part_count, name) for name in rt.store_names}
            except KeySchemaError:
                log_event(
                    log, "error", "erasure.bad_key", "stored key refused; not confirmed", file_id=str(row.file_id)
                )
                continue
            # A read of each store, key by key (K1: outside any transaction).
            left_in = {name: rt.maintenance_of(name).remains(found) for name, found in keys.items()}
            left = [key for found in left_in.values() for key in found]
            if not left and any(_uploads_left(rt, cleared, row.file_id, row.object_key, name) for name in keys):
                continue  # aborted again just now; the next round reads again
            if not left:
                absent[row.file_id] = len(keys[rt.primary])
            elif len(left) <= row.keys_locked and not any(
                rt.store_named(name).head(key) is not None for name, found in left_in.items() for key in found
            ):
                # What is left are versions a bucket's object lock keeps (its purge counted them), under a delete
                # marker, sealed under a data key destroyed with the purge: confirmed unreadable, counted apart.
                absent[row.file_id] = len(keys[rt.primary]) - len(left)
            else:
                # The row went but the store still holds a key (a delete it acknowledged and did not do):
                # delete it again; the next round reads again.
                log_event(
                    log,
                    "warning",
                    "erasure.key_remains",
                    "a purged file's key is still in the store; deleting it again",
                    file_id=str(row.file_id),
                    keys=len(left),
                )
                for name, found in left_in.items():
                    if found:
                        rt.files.remove_keys(cleared, {row.file_id: found}, store=name)

        def record(uow: UnitOfWork) -> None:
            confirmed = sql.set_confirmed(uow.conn, erasure_id, absent, rt.clock.now())  # each file once
            receipts_sql.set_confirmed_absent(uow.conn, confirmed)
            sql.add_counts(
                uow.conn, erasure_id, files_purged=len(confirmed), keys_confirmed_absent=sum(confirmed.values())
            )

        if absent:
            rt.db.unit_of_work(record, name="erasure.confirm")
        if len(rows) < batch:
            return
        after = rows[-1].file_id


def _finish(rt: Runtime, row: ErasureRow, subject: uuid.UUID) -> str:
    left = rt.db.read(lambda conn: sql.remaining(conn, subject, row.id))
    now = rt.clock.now()
    if not any(left.as_counts().values()):

        def complete(uow: UnitOfWork) -> None:
            sql.finish(uow.conn, row.id, "complete", None, now)
            holds_sql.forget_subject(uow.conn, subject, now)  # released holds stop naming the person
            quotas_sql.forget(uow.conn, subject)  # its quota and usage counters (all zero: nothing of it is left)
            journal.record_erasure(uow, rt.cfg, row.id, subject, now)  # replayed after a restore of the database
            if not webhooks.wanted(rt.cfg, ERASURE_COMPLETED):
                return
            done = sql.erasure(uow.conn, row.id)
            assert done is not None  # this transaction just finished it
            # After the confirming read, with the completion: counts and file ids, never the subject.
            webhooks.record_event(
                uow,
                rt.cfg,
                ERASURE_COMPLETED,
                {
                    "erasure_id": str(row.id),
                    "files_marked": done.files_marked,
                    "files_purged": done.files_purged,
                    "keys_confirmed_absent": done.keys_confirmed_absent,
                    "messages_removed": done.messages_removed,
                    "drafts_removed": done.drafts_removed,
                    "file_ids": [str(file_id) for file_id in sql.file_ids_of(uow.conn, row.id)],
                },
                now,
            )

        rt.db.unit_of_work(complete, name="erasure.finish")
        log_event(log, "info", "erasure.complete", "erasure complete", erasure_id=str(row.id))
        return "complete"
    if now - row.created_at > rt.lifecycle.object_delete_delay:
        rt.db.unit_of_work(
            lambda uow: sql.finish(uow.conn, row.id, "failed", "not_done_within_delay", now), name="erasure.finish"
        )
        log_event(
            log,
            "warning",
            "erasure.failed",
            "erasure not complete within privacy.object_delete_delay",
            erasure_id=str(row.id),
            **left.as_counts(),
        )
        return "failed"
    log_event(
        log, "info", "erasure.pending", "erasure round done; more to do", erasure_id=str(row.id), **left.as_counts()
    )
    return "running"
