# The audit is the operator's safety net, never part of the normal path (D16). It is the only listing of
# Lethe's own key space (f/ and uploads/), and it is read-only unless asked to delete. With --delete it removes
# orphans only: objects whose file id has no row, last written before the grace, re-checked against the
# table and the one rule for bytes just before their wave goes out; never an object a row explains or a legal
# hold covers. It
# holds neither listing nor table in memory: f/ is listed in ascending file id order (fixed-length directory names) and merged with the rows
# read in id order, page by page.
"""`lethe audit`: objects no row explains, objects of deleted rows still present, deliverable rows whose
original is missing."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby
from typing import TYPE_CHECKING, Any

from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import sessions as sessions_sql
from app.db import stores as stores_sql
from app.db.files import FileRow
from app.db.pool import Database
from app.domain.ends import Clearance, Reach
from app.domain.keys import FILES_PREFIX, UPLOADS_PREFIX
from app.domain.objects import FileObjects, owner_of, parse
from app.domain.states import is_deliverable
from app.lifecycle.waves import delete_in_waves
from app.platform.observability.logs import log_event
from app.storage.base import DeleteFailure, ListedObject, ListedUpload, MultipartRef

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.audit")
ROWS_PAGE = 1000
STRAYS_KEPT = 10_000  # files of strays one audit removes (with --delete); the next audit takes the rest
IDS_SHOWN = 1000  # ids kept per finding; the counts are always exact


@dataclass
class Finding:
    count: int = 0
    file_ids: list[str] = field(default_factory=list)

    def add(self, file_id: uuid.UUID, objects: int = 1) -> None:
        self.count += objects
        if len(self.file_ids) < IDS_SHOWN:
            self.file_ids.append(str(file_id))


@dataclass
class AuditReport:
    """Counts (objects for the first two findings, rows for the third) and file ids, never a key."""

    started_at: datetime
    listed: int = 0
    orphans: Finding = field(default_factory=Finding)
    deleted_present: Finding = field(default_factory=Finding)
    missing_originals: Finding = field(default_factory=Finding)
    unrecognized: int = 0
    delete: bool = False
    orphans_deleted: int = 0
    orphans_failed: int = 0
    orphans_too_young: int = 0
    # Unfinished multipart uploads under f/ and uploads/ whose session row is gone or ended: orphans, but for
    # those a legal hold keeps (their file's bytes wait for the purge after the release).
    uploads_orphaned: Finding = field(default_factory=Finding)
    uploads_held: Finding = field(default_factory=Finding)
    uploads_aborted: int = 0
    # Image variants listed under f/, and those of live files the table records as not ready (a job that
    # died between its write and its record): the file's own, so never orphans; the purge takes them with it.
    variants: int = 0
    variants_unrecorded: Finding = field(default_factory=Finding)
    store: str = "default"  # the store audited
    # Objects of live files another store holds: the copies a migration records (made, or left in the store the
    # file moved from; removed when due), and those no row counts (removed with --delete).
    copies: Finding = field(default_factory=Finding)
    elsewhere: Finding = field(default_factory=Finding)
    elsewhere_deleted: int = 0

    def as_dict(self) -> dict[str, Any]:
        def finding(f: Finding) -> dict[str, Any]:
            return {"count": f.count, "file_ids": f.file_ids, "file_ids_truncated": f.count > len(f.file_ids)}

        return {
            "started_at": self.started_at.isoformat(),
            "listed": self.listed,
            "orphans": finding(self.orphans),
            "deleted_present": finding(self.deleted_present),
            "missing_originals": finding(self.missing_originals),
            "unrecognized": self.unrecognized,
            "delete": self.delete,
            "orphans_deleted": self.orphans_deleted,
            "orphans_failed": self.orphans_failed,
            "orphans_too_young": self.orphans_too_young,
            "uploads_orphaned": finding(self.uploads_orphaned),
            "uploads_held": finding(self.uploads_held),
            "uploads_aborted": self.uploads_aborted,
            "variants": self.variants,
            "variants_unrecorded": finding(self.variants_unrecorded),
            "store": self.store,
            "copies": finding(self.copies),
            "elsewhere": finding(self.elsewhere),
            "elsewhere_deleted": self.elsewhere_deleted,
        }


def is_variant(key: str) -> bool:
    """Whether a key of the schema names an image variant."""
    parsed = parse(key)
    return parsed is not None and parsed[1] == "variant"


def file_id_of(key: str) -> uuid.UUID | None:
    """The file id a key of Lethe's schema belongs to, or None for a key outside the schema."""
    return owner_of(key)


def _rows_in_id_order(db: Database, store: str) -> Iterator[tuple[FileRow, bool]]:
    """Every row in id order, each with whether `store` may hold a copy of it that is not its own (a migration's
    copy being made, or the one left in the store it moved from)."""
    after = uuid.UUID(int=0)
    while True:
        page = db.read(lambda conn: files_sql.rows_after(conn, after, ROWS_PAGE))
        elsewhere = [row.id for row in page if row.store != store]
        copies = db.read(lambda conn: stores_sql.copies_in(conn, store, elsewhere)) if elsewhere else set()
        yield from ((row, row.id in copies) for row in page)
        if len(page) < ROWS_PAGE:
            return
        after = page[-1].id


def run_audit(
    rt: Runtime,
    delete: bool = False,
    grace: timedelta = timedelta(hours=24),
    progress: Callable[[int], None] | None = None,
    store: str | None = None,
) -> AuditReport:
    """List f/ and uploads/ of one store (None: the primary) and report what no row explains (both drivers; S3
    page by page). `lethe audit` runs it on every store.

    Args:
        delete: remove orphans last written before now - grace, in waves.
        progress: called with the number of objects listed so far, every 1,000 objects.
    """
    with rt.db.maintenance():  # maintenance work: its own statement timeout
        return _audit(rt, delete, grace, progress, store or rt.primary)


def _audit(
    rt: Runtime, delete: bool, grace: timedelta, progress: Callable[[int], None] | None, store: str
) -> AuditReport:
    report = AuditReport(started_at=rt.clock.now(), delete=delete, store=store)
    cutoff = report.started_at - grace
    maintenance = rt.maintenance_of(store)

    def counted(listing: Iterable[ListedObject]) -> Iterator[ListedObject]:
        for listed in listing:
            report.listed += 1
            if progress is not None and report.listed % 1000 == 0:
                progress(report.listed)
            yield listed

    def grouped(prefix: str) -> Iterator[tuple[uuid.UUID, list[ListedObject]]]:
        known = ((file_id_of(obj.key), obj) for obj in counted(maintenance.list_prefix(prefix)))
        for file_id, items in groupby(known, key=lambda pair: pair[0]):
            objects = [obj for _, obj in items]
            if file_id is None:
                report.unrecognized += len(objects)
            else:
                yield file_id, objects

    def row_says_original_missing(row: FileRow, objects: list[ListedObject]) -> bool:
        return (
            row.deleted_at is None
            and is_deliverable(row.upload_state, row.scan_status)
            and row.last_change_at < report.started_at
            and row.object_key not in {o.key for o in objects}
        )

    def orphan(file_id: uuid.UUID, objects: list[ListedObject]) -> Iterator[tuple[uuid.UUID, list[str]]]:
        report.orphans.add(file_id, len(objects))
        old = [obj.key for obj in objects if obj.modified_at < cutoff]
        report.orphans_too_young += len(objects) - len(old)
        if old:
            yield file_id, old

    def files_pass() -> Iterator[tuple[uuid.UUID, list[str]]]:
        rows = _rows_in_id_order(rt.db, store)
        row, copy_here = next(rows, (None, False))
        for file_id, objects in grouped(FILES_PREFIX):
            while row is not None and row.id < file_id:
                if row.store == store and row_says_original_missing(row, []):
                    report.missing_originals.add(row.id)
                row, copy_here = next(rows, (None, False))
            variants = [obj for obj in objects if is_variant(obj.key)]
            report.variants += len(variants)
            if row is not None and row.id == file_id and row.store != store and row.deleted_at is None:
                # A live file another store holds: its copy here is a migration's (recorded: removed when due) or
                # a stray no row counts (removed with --delete, as the one rule allows).
                if copy_here:
                    report.copies.add(file_id, len(objects))
                else:
                    report.elsewhere.add(file_id, len(objects))
                    old = [obj.key for obj in objects if obj.modified_at < cutoff]
                    if old and len(strays) < STRAYS_KEPT:
                        strays[file_id] = old
                row, copy_here = next(rows, (None, False))
            elif row is not None and row.id == file_id:
                if row.deleted_at is not None:
                    report.deleted_present.add(file_id, len(objects))
                elif row_says_original_missing(row, objects):
                    report.missing_originals.add(row.id)
                ready = {FileObjects(file_id).variant(str(thumb["name"])) for thumb in row.thumbnails}
                unrecorded = [obj for obj in variants if obj.key not in ready and obj.modified_at < cutoff]
                if row.deleted_at is None and unrecorded:
                    report.variants_unrecorded.add(file_id, len(unrecorded))
                row, copy_here = next(rows, (None, False))
            else:
                yield from orphan(file_id, objects)
        while row is not None:
            if row.store == store and row_says_original_missing(row, []):
                report.missing_originals.add(row.id)
            row, copy_here = next(rows, (None, False))

    def uploads_pass() -> Iterator[tuple[uuid.UUID, list[str]]]:
        chunk: list[tuple[uuid.UUID, list[ListedObject]]] = []
        for group in grouped(UPLOADS_PREFIX):
            chunk.append(group)
            if len(chunk) == ROWS_PAGE:
                yield from _uploads_chunk(chunk)
                chunk = []
        yield from _uploads_chunk(chunk)

    def _uploads_chunk(chunk: list[tuple[uuid.UUID, list[ListedObject]]]) -> Iterator[tuple[uuid.UUID, list[str]]]:
        if not chunk:
            return
        found = {r.id: r for r in rt.db.read(lambda conn: files_sql.files_by_ids(conn, [i for i, _ in chunk]))}
        for file_id, objects in chunk:
            row = found.get(file_id)
            if row is None:
                yield from orphan(file_id, objects)
            elif row.deleted_at is not None:
                report.deleted_present.add(file_id, len(objects))

    def still_orphans(candidates: Iterator[tuple[uuid.UUID, list[str]]]) -> Iterator[tuple[str, Clearance]]:
        """Re-check against the table and the one rule just before deleting: a row that appeared meanwhile
        explains its objects, and a legal hold on the id keeps them."""
        pending: list[tuple[uuid.UUID, list[str]]] = []

        def flush() -> Iterator[tuple[str, Clearance]]:
            ids = [file_id for file_id, _ in pending]
            existing = {r.id for r in rt.db.read(lambda conn: files_sql.files_by_ids(conn, ids))}
            orphans = [file_id for file_id in ids if file_id not in existing]
            cleared = rt.db.unit_of_work(
                lambda uow: keeps_sql.clearance(uow, orphans, Reach.FILE, rt.clock.now()), name="audit.clear"
            )
            for file_id, keys in pending:
                if file_id not in existing and file_id in cleared:
                    yield from ((key, cleared) for key in keys)

        for candidate in candidates:
            pending.append(candidate)
            if len(pending) == ROWS_PAGE:
                yield from flush()
                pending = []
        if pending:
            yield from flush()

    def both_passes() -> Iterator[tuple[uuid.UUID, list[str]]]:
        yield from files_pass()
        yield from uploads_pass()

    def remove(batch: Sequence[tuple[str, Clearance]]) -> list[DeleteFailure]:
        failures: list[DeleteFailure] = []
        for cleared, group in groupby(batch, key=lambda pair: pair[1]):
            by_file: dict[uuid.UUID, list[str]] = {}
            for key, _ in group:
                by_file.setdefault(file_id_of(key) or uuid.UUID(int=0), []).append(key)
            failures += rt.files.remove_keys(cleared, by_file, store=store)
        return failures

    strays: dict[uuid.UUID, list[str]] = {}
    if delete:
        waves = delete_in_waves(remove, still_orphans(both_passes()), rt.lifecycle.sweep_concurrency)
        report.orphans_deleted, report.orphans_failed = waves.deleted, waves.failed
        report.elsewhere_deleted = _remove_strays(rt, store, strays)
    else:
        for _ in both_passes():
            pass
    _multipart_uploads(rt, report, delete, cutoff, store)
    log_event(
        log,
        "info",
        "audit.ran",
        "audit finished",
        listed=report.listed,
        orphans=report.orphans.count,
        deleted_present=report.deleted_present.count,
        missing_originals=report.missing_originals.count,
        unrecognized=report.unrecognized,
        delete=delete,
        orphans_deleted=report.orphans_deleted,
        orphans_failed=report.orphans_failed,
        uploads_orphaned=report.uploads_orphaned.count,
        uploads_held=report.uploads_held.count,
        uploads_aborted=report.uploads_aborted,
        variants=report.variants,
        variants_unrecorded=report.variants_unrecorded.count,
    )
    return report


def _multipart_uploads(rt: Runtime, report: AuditReport, delete: bool, cutoff: datetime, store: str) -> None:
    """Unfinished multipart uploads under f/ and uploads/ (ListMultipartUploads, paged; S3) whose session row
    is gone or no longer open: a lost abort, or a direct upload's part that landed after it. With
    delete, those begun before the grace are aborted, after a re-check against the table."""
    for prefix in (FILES_PREFIX, UPLOADS_PREFIX):
        chunk: list[ListedUpload] = []
        for listed in rt.maintenance_of(store).list_uploads(prefix):
            chunk.append(listed)
            if len(chunk) == ROWS_PAGE:
                _multipart_chunk(rt, report, chunk, delete, cutoff, store)
                chunk = []
        _multipart_chunk(rt, report, chunk, delete, cutoff, store)


def _remove_strays(rt: Runtime, store: str, strays: dict[uuid.UUID, list[str]]) -> int:
    """Remove the copies in `store` of live files another store holds that no copy row records, after a re-check
    (the row still names another store, no copy was recorded meanwhile) and as the one rule allows (a hold keeps
    them). Returns how many keys went."""
    if not strays:
        return 0
    ids = sorted(strays)
    rows = {row.id: row for row in rt.db.read(lambda conn: files_sql.files_by_ids(conn, ids))}
    recorded = rt.db.read(lambda conn: stores_sql.copies_in(conn, store, ids))
    doomed = {
        file_id: keys
        for file_id, keys in strays.items()
        if file_id in rows and rows[file_id].store != store and file_id not in recorded
    }
    if not doomed:
        return 0
    cleared = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, sorted(doomed), Reach.STRAY, rt.clock.now()), name="audit.clear"
    )
    failures = rt.files.remove_keys(cleared, doomed, store=store)
    return sum(len(keys) for file_id, keys in doomed.items() if file_id in cleared) - len(failures)


def _multipart_chunk(
    rt: Runtime, report: AuditReport, chunk: list[ListedUpload], delete: bool, cutoff: datetime, store: str
) -> None:
    if not chunk:
        return
    owners = [(listed, file_id_of(listed.key)) for listed in chunk]
    ids = sorted({file_id for _, file_id in owners if file_id is not None})
    open_ids = rt.db.read(lambda conn: sessions_sql.open_upload_ids(conn, ids))
    held = rt.db.read(lambda conn: keeps_sql.held_among(conn, ids))
    doomed = []
    for listed, file_id in owners:
        if file_id is None:
            report.unrecognized += 1
            continue
        if (file_id, listed.upload_id) in open_ids:
            continue  # a live session's upload
        if file_id in held:
            report.uploads_held.add(file_id)  # kept, not an orphan: the purge after the release aborts it
            continue
        report.uploads_orphaned.add(file_id)
        if delete and listed.initiated_at is not None and listed.initiated_at < cutoff:
            doomed.append((listed, file_id))
    if not doomed:
        return
    # Re-checked just before the aborts: a session opened meanwhile explains its upload, and the one rule asked
    # again (an upload no session counts is a stray: only a legal hold keeps it).
    doomed_ids = sorted({f for _, f in doomed})
    still_open = rt.db.read(lambda conn: sessions_sql.open_upload_ids(conn, doomed_ids))
    cleared = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, doomed_ids, Reach.STRAY, rt.clock.now()), name="audit.clear"
    )
    uploads: dict[uuid.UUID, list[MultipartRef]] = {}
    for listed, file_id in doomed:
        if (file_id, listed.upload_id) not in still_open:
            uploads.setdefault(file_id, []).append(MultipartRef(str(file_id), listed.key, listed.upload_id))
    report.uploads_aborted += rt.files.abort_uploads(cleared, uploads, store=store)
