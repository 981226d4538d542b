# The consequences of a file's end hang here, the way Dramatiq's middleware hangs on a message's life: each
# subscriber implements the hooks it needs and inherits no-ops for the others. A hook runs inside the
# transaction that commits its event (the mark, the objects gone, the row removed), so what it writes commits
# or rolls back with it; work for after the commit is registered on the unit of work (uow.after_commit).
# Subscribers never touch the store (K1) and never see a name, key or digest (D15).
"""The end of a file as events with subscribers: key destruction, receipts, webhooks, hold accounting, the
journal, metrics."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.db import file_keys as file_keys_sql
from app.db import keeps as keeps_sql
from app.db import receipts as receipts_sql
from app.db.uow import UnitOfWork
from app.domain.ends import FilesMarked, FilesSettled, ObjectsGone, RemovalBegun, RowsRemoved
from app.domain.journal import FILE_MARKED, OBJECTS_GONE, ROW_REMOVED, Entry
from app.lifecycle import journal, webhooks
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.platform.config import Config

log = logging.getLogger("lethe.ends")


class EndSubscriber:
    """A consequence of a file's end. The default hooks do nothing; a subscriber implements what it needs."""

    # The mark's statement writes a deletion-journal entry for this subscriber (as it writes the purge job): one
    # round trip fewer for every deletion than an insert of its own in files_marked.
    journals_marks = False

    def files_marked(self, uow: UnitOfWork, event: FilesMarked) -> None:
        """Files were marked deleted in this transaction (D5)."""

    def removal_begun(self, uow: UnitOfWork, event: RemovalBegun) -> None:
        """The removal of these files' bytes begins with this transaction: the point of no return (a legal hold
        placed after it no longer keeps them). Announced by the one rule's clearance (app/db/keeps.py)."""

    def objects_gone(self, uow: UnitOfWork, event: ObjectsGone) -> None:
        """The objects of these files left the store; this transaction records it."""

    def rows_removed(self, uow: UnitOfWork, event: RowsRemoved) -> None:
        """These deleted files' rows are removed in this transaction (D7)."""

    def files_settled(self, uow: UnitOfWork, event: FilesSettled) -> None:
        """Before any end: these files became deliverable, blocked or failed, or their variants ready, in this
        transaction (announced by app/db/events.py's announce_settled)."""


class Receipts(EndSubscriber):
    """A name-free receipt per removed row (D16), with the legal holds that deferred it or came too late."""

    def rows_removed(self, uow: UnitOfWork, event: RowsRemoved) -> None:
        receipts_sql.write(uow.conn, event.rows, event.at)


class Webhooks(EndSubscriber):
    """A `file.purged` message per removed row and subscribed endpoint, from its receipt (so after Receipts);
    and the lifecycle messages (`file.ready`, `file.blocked`, `file.failed`, `file.variants_ready`)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def rows_removed(self, uow: UnitOfWork, event: RowsRemoved) -> None:
        webhooks.record_file_purged(uow, self.cfg, event.file_ids, event.at)

    def files_settled(self, uow: UnitOfWork, event: FilesSettled) -> None:
        webhooks.record_files_settled(uow, self.cfg, event)


class HoldAccounting(EndSubscriber):
    """Whatever a legal hold could not keep is said: files whose objects went while a hold covers them (it was
    placed after their removal began) are counted and logged, ids never."""

    def objects_gone(self, uow: UnitOfWork, event: ObjectsGone) -> None:
        lost = keeps_sql.held_among(uow.conn, event.file_ids)
        if lost:
            uow.after_commit(lambda: metrics.HOLD_FILES_LOST.inc(len(lost)))
            log_event(
                log,
                "warning",
                "hold.too_late",
                "a legal hold was placed after the removal of some of its "
                "files had begun; their bytes could not be kept (their rows and receipts say so)",
                files=len(lost),
            )


class Journal(EndSubscriber):
    """The end of a file in the deletion journal: the mark, the objects gone and the row removed, each committed
    with its change (app/lifecycle/journal.py writes them out of the database)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.journals_marks = cfg.journal.enabled

    def files_marked(self, uow: UnitOfWork, event: FilesMarked) -> None:
        # The mark's own statement wrote the entry (journals_marks); the process's writer takes it up.
        if event.journal_entry is not None:
            installation, entry_id = event.journal_entry
            journal.taken_up(
                uow,
                installation,
                [Entry(FILE_MARKED, event.at, files=tuple(event.file_ids), via=event.via, id=entry_id)],
            )

    def objects_gone(self, uow: UnitOfWork, event: ObjectsGone) -> None:
        journal.record(uow, self.cfg, [Entry(OBJECTS_GONE, event.at, files=tuple(event.file_ids))])

    def rows_removed(self, uow: UnitOfWork, event: RowsRemoved) -> None:
        journal.record(uow, self.cfg, [Entry(ROW_REMOVED, event.at, files=tuple(event.file_ids))])


class KeyDestruction(EndSubscriber):
    """A file's data key is destroyed at the point of no return of its removal, in the transaction that records
    it: from its commit nothing the database (or a backup taken later) holds opens any copy of the file's bytes,
    the ones the store is about to delete and the ones out of any delete's reach alike (an object lock, a
    replica, a snapshot). Until then a legal hold keeps the key with the bytes. Whatever ends without such a
    clearance loses its key when its objects are recorded gone (a row kept for its uploader) or its row goes."""

    def removal_begun(self, uow: UnitOfWork, event: RemovalBegun) -> None:
        self._destroy(uow, event.file_ids)

    def objects_gone(self, uow: UnitOfWork, event: ObjectsGone) -> None:
        self._destroy(uow, event.file_ids)

    @staticmethod
    def _destroy(uow: UnitOfWork, file_ids: Sequence[uuid.UUID]) -> None:
        destroyed = file_keys_sql.destroy(uow.conn, file_ids)
        if destroyed:
            uow.after_commit(lambda: metrics.KEYS_DESTROYED.inc(destroyed))


class Metrics(EndSubscriber):
    """Counters and the delete-to-gone histogram, counted only once their change committed."""

    def files_marked(self, uow: UnitOfWork, event: FilesMarked) -> None:
        count, via = len(event.file_ids), event.via
        uow.after_commit(lambda: metrics.FILES_DELETED.labels(via).inc(count))

    def rows_removed(self, uow: UnitOfWork, event: RowsRemoved) -> None:
        ages = [max((event.at - row.marked_at).total_seconds(), 0.0) for row in event.rows]

        def observe() -> None:
            for age in ages:
                metrics.DELETE_TO_GONE.observe(age)

        uow.after_commit(observe)


def standard(cfg: Config) -> list[EndSubscriber]:
    """Every subscriber of a file's end, in the order they run (a receipt before the webhook made of it). The
    composition root (app/entry/wiring.py) hands them to the database's units of work."""
    return [KeyDestruction(), Receipts(), Webhooks(cfg), HoldAccounting(), Journal(cfg), Metrics()]


def _subscribers(uow: UnitOfWork) -> Sequence[EndSubscriber]:
    if uow.subscribers is None:
        raise RuntimeError("no end-of-file subscribers were wired into this database (app/entry/wiring.py)")
    return uow.subscribers


def journals_marks(uow: UnitOfWork) -> bool:
    """Whether the mark's statement writes a deletion-journal entry (a subscriber asks for it)."""
    return any(subscriber.journals_marks for subscriber in _subscribers(uow))


def files_marked(uow: UnitOfWork, event: FilesMarked) -> None:
    """Tell every subscriber that files were marked deleted in this unit of work."""
    for subscriber in _subscribers(uow):
        subscriber.files_marked(uow, event)


def objects_gone(uow: UnitOfWork, event: ObjectsGone) -> None:
    """Tell every subscriber that these files' objects left the store."""
    for subscriber in _subscribers(uow):
        subscriber.objects_gone(uow, event)


def rows_removed(uow: UnitOfWork, event: RowsRemoved) -> None:
    """Tell every subscriber that these rows are removed in this unit of work."""
    for subscriber in _subscribers(uow):
        subscriber.rows_removed(uow, event)
