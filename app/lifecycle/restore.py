# Reconciliation after a restore: every journal entry past the database's position is applied again, each in a
# transaction of its own that records how far it got (resumable; an entry applied twice changes nothing): files
# the journal says ended are marked deleted through the one deletion function (redaction included) and purged,
# erasures run again for the persons whose keyed hash matches, holds are placed and released as the journal says.
# Then store and rows are checked both ways, and only then does the database stand at the journal's head.
"""`lethe restore reconcile` and journal.auto_reconcile: apply the deletion journal again after a restore."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.db import erasures as erasures_sql
from app.db import files as files_sql
from app.db import holds as holds_sql
from app.db import journal as sql
from app.db import keeps as keeps_sql
from app.db import messages as messages_sql
from app.db import stores as stores_sql
from app.db.locks import exclusive
from app.db.uow import UnitOfWork
from app.domain.ends import Reach
from app.domain.journal import (
    ERASURE_COMPLETED,
    FILE_KINDS,
    FILE_MOVED,
    HOLD_PLACED,
    HOLD_RELEASED,
    OBJECTS_GONE,
    Damage,
    Entry,
    ReadSegment,
    Segment,
    SegmentDamaged,
    chain,
    read_segment,
    read_spool,
    subject_hash,
)
from app.domain.objects import FileObjects
from app.errors import Conflict, NotFound
from app.lifecycle.audit import run_audit
from app.lifecycle.erasure import erase_round, request_erasure
from app.lifecycle.holds import release_hold
from app.lifecycle.journal import escrowed_hash_key
from app.platform import tracing
from app.platform.jobs import enqueue_purge
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.storage.journal import JournalSink

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.journal")


@dataclass
class ReconcileReport:
    """What a reconciliation applied (or would apply, dry): counts only, never a name."""

    position: int = 0
    head: int = 0
    entries: int = 0
    files_marked: int = 0
    files_purged_again: int = 0
    erasures: int = 0
    spooled: int = 0
    persons_not_found: int = 0
    holds_placed: int = 0
    holds_released: int = 0
    objects_removed: int = 0
    orphans_deleted: int = 0
    files_moved_again: int = 0  # rows told the store a migration moved their file to after the backup
    dry_run: bool = False
    by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dict(self.__dict__)


class JournalDamaged(Exception):
    """The journal past the database's position does not verify: the reconciliation applied nothing of it (the
    damage is recorded; data requests wait with the reason journal_damaged)."""

    def __init__(self, damage: Damage):
        super().__init__(damage.describe())
        self.damage = damage


def reconcile(
    rt: Runtime,
    dry_run: bool = False,
    after_entry: Callable[[Entry], None] | None = None,
    batch_files: int = 1000,
    accept: Sequence[str] = (),
) -> ReconcileReport:
    """Apply the journal again (a span `restore.reconcile` with its counts). See _reconcile_all."""
    with tracing.span("restore.reconcile", dry_run=dry_run):
        report = _reconcile_all(rt, dry_run, after_entry, batch_files, accept)
        tracing.count(**{k: v for k, v in report.as_dict().items() if isinstance(v, int) and not isinstance(v, bool)})
        return report


def _reconcile_all(
    rt: Runtime,
    dry_run: bool = False,
    after_entry: Callable[[Entry], None] | None = None,
    batch_files: int = 1000,
    accept: Sequence[str] = (),
) -> ReconcileReport:
    """Apply every journal entry past the database's position again, and every spooled entry it does not know,
    through the one deletion function; then check store and rows both ways, and move the database to the
    journal's head. Idempotent and resumable. Every segment is verified before anything is applied.

    Args:
        dry_run: count what would be applied; change nothing.
        after_entry: called after each entry is applied (tests stop a reconciliation half-way with it).
        batch_files: files applied in one transaction (consecutive ends of files go together).
        accept: damage the operator accepted (a segment's key, or missing numbers as the error named them): what
            can be read of it is applied, and the reconciliation goes on past it.

    Raises:
        JournalDamaged: a segment does not verify, or numbers are missing (recorded, unless dry).
        StorageError: the journal cannot be read.
    """
    with exclusive(rt.db, sql.RECONCILE_LOCK_KEY) as mine:
        if not mine:
            log_event(log, "info", "journal.reconcile_busy", "another runner is reconciling the journal")
            return ReconcileReport(dry_run=dry_run)
        # Read under the lock: a runner that finished just before moved the position.
        st = rt.db.read(sql.state)
        sink = JournalSink(rt.store, st.installation_id)
        listing = sink.after(st.position)
        try:
            read = _verified(sink, listing.segments, st, frozenset(accept))
            spooled = _spooled(rt, sink, listing.spooled)
        except SegmentDamaged as exc:
            damage = exc.damage
            if not dry_run:
                rt.db.unit_of_work(lambda uow: sql.set_damaged(uow.conn, damage), name="journal.damaged")
            log_event(
                log,
                "error",
                "journal.damaged",
                "the deletion journal is damaged past the database's position; nothing of it was applied",
                where=damage.where,
                line=damage.line,
                what=damage.what,
            )
            raise JournalDamaged(exc.damage) from None
        ahead = [item for item in read if item.last > st.position]
        head = max([st.position] + [item.last for item in ahead])
        report = ReconcileReport(position=st.position, head=head, dry_run=dry_run)
        if not ahead and not spooled:
            if st.damaged and not dry_run:  # mended (the segment was put back) and nothing is left to apply
                rt.db.unit_of_work(lambda uow: sql.set_damaged(uow.conn, None), name="journal.damaged")
            return report
        head_digest = max(ahead, key=lambda item: item.last).digest if ahead else None
        entries = [entry for item in ahead for entry in item.entries if entry.seq > max(st.position, st.reconciled_to)]
        return _reconcile(rt, st, entries, spooled, head_digest, report, after_entry, batch_files)


def _verified(
    sink: JournalSink, segments: Sequence[Segment], st: sql.JournalState, accepted: frozenset[str]
) -> list[ReadSegment]:
    """Every segment past the position, read and verified, and their chain (no numbers missing, none replaced)."""
    read = []
    for segment in segments:
        try:
            text = sink.read(segment.key)
        except NotFound:
            continue  # gone since the listing (pruned): the chain says whether numbers are missing
        read.append(read_segment(segment, text, accept=segment.key in accepted))
    chain(st.position, st.head_digest, read, accepted)
    return read


def _spooled(rt: Runtime, sink: JournalSink, keys: Sequence[str]) -> list[Entry]:
    """The spooled entries this database does not know (committed to a database that is gone)."""
    entries: list[Entry] = []
    for key in keys:
        try:
            entries += read_spool(key, sink.read(key))
        except NotFound:
            continue
    ids = [entry.id for entry in entries if entry.id is not None]
    known = rt.db.read(lambda conn: sql.known_among(conn, ids)) if ids else set()
    unknown: dict[uuid.UUID, Entry] = {}
    for entry in entries:
        if entry.id is not None and entry.id not in known:
            unknown.setdefault(entry.id, entry)
    return sorted(unknown.values(), key=lambda entry: entry.at)


def _reconcile(
    rt: Runtime,
    st: sql.JournalState,
    entries: list[Entry],
    spooled: list[Entry],
    head_digest: str | None,
    report: ReconcileReport,
    after_entry: Callable[[Entry], None] | None,
    batch_files: int,
) -> ReconcileReport:
    dry_run = report.dry_run
    everything = entries + spooled
    for entry in everything:
        report.by_kind[entry.kind] = report.by_kind.get(entry.kind, 0) + 1
    report.entries = len(entries)
    report.spooled = len(spooled)
    if dry_run:
        report.files_marked = len(
            {file_id for entry in everything if entry.kind in FILE_KINDS for file_id in entry.files}
        )
        return report
    log_event(
        log,
        "warning",
        "journal.reconcile_started",
        "applying the deletion journal again after a restore",
        entries=len(entries),
        spooled=len(spooled),
        position=st.position,
        head=report.head,
    )
    hashes: dict[str, list[uuid.UUID]] | None = None
    # A person is matched under every key the journal may have hashed them with: the configured one, and the one
    # the database made (an installation that set journal.hash_key later hashed earlier entries with that).
    # A journal adopted from a database that is gone was hashed with that database's key, kept beside it.
    escrowed = escrowed_hash_key(rt, st.installation_id)
    keys = list(dict.fromkeys(key for key in (rt.cfg.journal.hash_key, st.hash_key, escrowed) if key))
    ended: set[uuid.UUID] = set()  # every file a journaled end names, applied once
    group: list[Entry] = []
    grouped = [0]  # files named by the group

    def apply_group() -> None:
        if group:
            _apply_files(rt, group, ended, report)
            for applied in group:
                if after_entry is not None:
                    after_entry(applied)
            group.clear()
            grouped[0] = 0

    for entry in everything:
        if entry.kind in FILE_KINDS:
            # Consecutive ends of files are applied together, up to batch_files files a transaction.
            group.append(entry)
            grouped[0] += len(entry.files)
            if grouped[0] >= batch_files:
                apply_group()
            continue
        apply_group()
        if entry.subject is not None and hashes is None:
            hashes = {}
            for principal in rt.db.read(sql.known_principals):
                for key in keys:
                    hashes.setdefault(subject_hash(key, principal), []).append(principal)
        _apply(rt, entry, hashes or {}, report)
        if after_entry is not None:
            after_entry(entry)
    apply_group()
    if spooled:
        # Committed again, so that the journal numbers them (their spool objects go once they are written).
        rt.db.unit_of_work(lambda uow: sql.adopt_entries(uow.conn, spooled), name="journal.adopt_spooled")
    report.objects_removed = _remove_left_objects(rt, sorted(ended))
    report.orphans_deleted = sum(run_audit(rt, delete=True, store=name).orphans_deleted for name in rt.store_names)
    rt.db.unit_of_work(
        lambda uow: sql.reconciled(uow.conn, report.head, head_digest, rt.clock.now()), name="journal.reconciled"
    )
    metrics.RESTORE_PENDING.set(0)
    log_event(
        log,
        "warning",
        "journal.reconciled",
        "the deletion journal was applied again; the database stands at its head",
        **{k: v for k, v in report.as_dict().items() if isinstance(v, int)},
    )
    return report


def _apply_files(rt: Runtime, group: list[Entry], handled: set[uuid.UUID], report: ReconcileReport) -> None:
    """Entries that say files ended, in one transaction: files the restored database has live are deleted again
    (detached from messages and slots first: the journal says they ended), deleted ones are purged again; each
    file once in a reconciliation."""
    now = rt.clock.now()
    ids = sorted({file_id for entry in group for file_id in entry.files} - handled)
    # A file's objects go without its deletion when it failed or was blocked (its row stays for its uploader):
    # an entry of objects gone alone says nothing of a deletion. Those files are purged again (objects only).
    deleted_ids = {file_id for entry in group if entry.kind != OBJECTS_GONE for file_id in entry.files}

    def ended(uow: UnitOfWork) -> None:
        if ids:
            rows = files_sql.lock_files(uow.conn, ids)
            objects_only = [row.id for row in rows if row.deleted_at is None and row.id not in deleted_ids]
            if objects_only:
                enqueue_purge(uow, objects_only)
            live = [row.id for row in rows if row.deleted_at is None and row.id in deleted_ids]
            if live:
                messages_sql.detach_files(uow.conn, live)
                uow.conn.execute("UPDATE slots SET file_id = NULL WHERE file_id = ANY(%s)", (live,))
                report.files_marked += len(rt.delete_files(uow, live, now, "restore"))
            deleted = [row.id for row in rows if row.deleted_at is not None]
            if deleted:
                enqueue_purge(uow, deleted)
                report.files_purged_again += len(deleted)
        sql.applied(uow.conn, group[-1].seq)

    rt.db.unit_of_work(ended, name="journal.apply_files")
    handled.update(file_id for file_id in ids if file_id in deleted_ids)  # a later mark of a failed file counts


def _apply(rt: Runtime, entry: Entry, hashes: dict[str, list[uuid.UUID]], report: ReconcileReport) -> None:
    if entry.kind == ERASURE_COMPLETED:
        persons = hashes.get(entry.subject or "", [])
        if not persons:
            report.persons_not_found += 1
        for person in persons:
            try:
                erasure = request_erasure(rt, None, person)
            except Conflict:  # a hold covers the person again: the erasure waits for its release, as ever
                log_event(
                    log,
                    "warning",
                    "journal.erasure_held",
                    "a journaled erasure waits: a legal hold covers the person",
                    erasure_id=str(entry.erasure),
                )
                continue
            _erase_now(rt, erasure.id, person)
            report.erasures += 1
    elif entry.kind == HOLD_PLACED and entry.hold is not None:
        hold_id = entry.hold
        # A hold on a person names them by hash: placed again on the person the restored database knows.
        subjects = hashes.get(entry.subject or "", []) if entry.subject else [None]
        file_id = entry.files[0] if entry.files else None

        def place(uow: UnitOfWork) -> None:
            # A hold on a file is placed again even when the restored database has no row of it (uploaded after
            # the backup): its objects stay out of the audit's orphans until the hold is released.
            if holds_sql.hold(uow.conn, hold_id) is not None:
                return
            for subject in subjects[:1]:
                keeps_sql.lock_against_removals(uow.conn)
                holds_sql.insert(uow.conn, hold_id, subject, file_id, entry.case_ref or "RESTORED-0", entry.at)
                report.holds_placed += 1

        rt.db.unit_of_work(place, name="journal.apply_hold")
    elif entry.kind == FILE_MOVED and entry.store is not None:
        moved_to, delay = entry.store, rt.lifecycle.object_delete_delay
        report.files_moved_again += rt.db.unit_of_work(
            lambda uow: stores_sql.moved_again(uow.conn, list(entry.files), moved_to, rt.clock.now(), delay),
            name="journal.apply_move",
        )
    elif entry.kind == HOLD_RELEASED and entry.hold is not None:
        released = entry.hold
        existing = rt.db.read(lambda conn: holds_sql.hold(conn, released))
        if existing is not None and existing.released_at is None:
            release_hold(rt, None, released)
            report.holds_released += 1
    rt.db.unit_of_work(lambda uow: sql.applied(uow.conn, entry.seq), name="journal.applied")


def _erase_now(rt: Runtime, erasure_id: uuid.UUID, person: uuid.UUID) -> None:
    """Run the replayed erasure here, before the database stands at its journal's head: until its marks are applied
    the person's restored drafts, messages and files could be served. Its rounds go on (the purge's confirmation)
    as the worker's job once the guard has lifted.

    Raises:
        ErasureNotApplied: rounds ran and something of the person a reader could be served is still there (the
            reconciliation stops; the guard stays up, and the next run tries again).
    """
    for _ in range(5):
        if erase_round(rt, erasure_id) != "running" or not rt.db.read(
            lambda conn: erasures_sql.servable_left(conn, person)
        ):
            return
    raise ErasureNotApplied(f"a replayed erasure ({erasure_id}) left rows of the person after 5 rounds")


class ErasureNotApplied(Exception):
    """A replayed erasure's marks could not be applied (the reconciliation stops before the guard lifts)."""


def _remove_left_objects(rt: Runtime, file_ids: list[uuid.UUID]) -> int:
    """The two-way check's first half: journaled files whose row is gone but whose objects a store still holds
    (a restored store, a replica that came back) lose them now, through the one rule. Every store is read: the
    row that named the file's stores is gone."""
    removed = 0
    for start in range(0, len(file_ids), 500):
        chunk = file_ids[start : start + 500]
        rows = {row.id for row in rt.db.read(lambda conn: files_sql.files_by_ids(conn, chunk))}
        gone = [file_id for file_id in chunk if file_id not in rows]
        for store in rt.store_names:
            removed += _remove_left_in(rt, gone, store)
    return removed


def _remove_left_in(rt: Runtime, gone: list[uuid.UUID], store: str) -> int:
    keys = {file_id: rt.files.keys_of(FileObjects.of_gone_row(file_id, store), with_tail=True) for file_id in gone}
    left = set(rt.maintenance_of(store).remains([key for file_keys in keys.values() for key in file_keys]))
    doomed = {file_id: [key for key in file_keys if key in left] for file_id, file_keys in keys.items()}
    doomed = {file_id: file_keys for file_id, file_keys in doomed.items() if file_keys}
    if not doomed:
        return 0
    clearance = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, sorted(doomed), Reach.FILE, rt.clock.now()), name="journal.clear"
    )
    failures = rt.files.remove_keys(clearance, doomed, store=store)
    return sum(len(file_keys) for file_id, file_keys in doomed.items() if file_id in clearance) - len(failures)
