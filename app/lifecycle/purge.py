# Purge is irreversible. It reads facts without a transaction, then for each small chunk of files asks the one
# rule for bytes right before their keys go (the clearance records that their removal begins: a legal hold
# placed after it counts them as lost, one placed before it keeps them whole), deletes objects outside every
# transaction (D4 K1), and removes a row only after re-checking it under its lock with the same rule (D7). A
# missing object counts as deleted. A file whose objects the store refused is isolated and retried later with
# backoff, so it never strands the others; a store-wide error is raised after what was done is recorded, so
# the job retries and nothing is lost. It never lists the store and never touches another file's objects
# (K2, K3). Receipts, webhooks, hold accounting and metrics are the subscribers of the end events it commits
# (app/lifecycle/ends.py).
"""purge_objects (D7): the objects of many files in chunks, then their rows in one transaction."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from app.db import aborts as aborts_sql
from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import purge_failures as failures_sql
from app.db import stores as stores_sql
from app.db.uow import UnitOfWork
from app.domain.ends import Keep, ObjectsGone, Reach, RemovedRow, RowsRemoved, keep
from app.domain.keys import KeySchemaError
from app.domain.objects import FileObjects
from app.domain.purge_plan import PurgeAction, PurgeFacts, objects_of, plan_purge
from app.domain.purge_retry import next_attempt_at, overdue
from app.domain.uploads import DIRECT
from app.errors import ObjectFailed, StorageError
from app.lifecycle import ends
from app.platform import tracing
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.platform.config import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.purge")
# Files cleared and removed at once: a legal hold placed while a purge runs loses at most the files of the
# chunk whose removal had begun (and says so), never the rest of the job.
PURGE_CHUNK = 100
_KEPT_AS = {Keep.ATTACHED: "kept_attached", Keep.SLOT: "kept_slot", Keep.HELD: "held"}


@dataclass
class PurgeReport:
    """What one purge run did, as counts (D15: no keys, no names)."""

    results: Counter[str] = field(default_factory=Counter)
    keys: int = 0


def read_facts(rt: Runtime, file_ids: Sequence[uuid.UUID]) -> list[PurgeFacts]:
    """The facts a purge plans from, one per id (a missing row is a fact too)."""
    rows = {row.file_id: row for row in rt.db.read(lambda conn: files_sql.purge_facts(conn, file_ids))}
    return [rows.get(file_id) or PurgeFacts(file_id=file_id, exists=False) for file_id in file_ids]


@dataclass
class _Done:
    """The files whose objects went, by what the plan does next, and the keys each had."""

    rows: list[uuid.UUID] = field(default_factory=list)
    objects_only: list[uuid.UUID] = field(default_factory=list)
    keys: dict[uuid.UUID, int] = field(default_factory=dict)
    direct_aborts: list[tuple[str, uuid.UUID, str]] = field(default_factory=list)
    refused: dict[uuid.UUID, str] = field(default_factory=dict)
    locked: dict[uuid.UUID, int] = field(default_factory=dict)  # versions an object lock keeps (sealed files)


def purge_files(rt: Runtime, file_ids: Sequence[uuid.UUID | str]) -> PurgeReport:
    """Purge many files: plan each, then chunk by chunk ask the rule and delete the freed files' objects with
    batched deletes (aborting their unfinished uploads), then remove the rows of the deleted ones in one
    transaction with a re-check per row.

    A file whose objects the store refused (one key, one upload) is isolated: the others go on, and it is
    recorded in purge_failures with its next attempt, which the cleanup's catch-up honours (D7, D8 d).

    Raises:
        StorageError: a store-wide failure (unreachable, timed out, 5xx); what went before it is recorded, the
            job retries and the catch-up step stops.
    """
    started = time.monotonic()
    ids = sorted({uuid.UUID(str(file_id)) for file_id in file_ids})
    report = PurgeReport()
    planned: list[tuple[list[FileObjects], PurgeFacts, PurgeAction]] = []
    for facts in read_facts(rt, ids):
        action = plan_purge(facts)
        if action is PurgeAction.NOTHING:
            report.results["nothing"] += 1
            continue
        try:
            # The same keys in every store that may hold some of them: its own, and those a migration copied to
            # or from (a file deleted while its copy ran ends up in neither store).
            planned.append(([objects_of(facts, store) for store in facts.stores], facts, action))
        except KeySchemaError:
            # A stored key that is not this file's original: delete nothing on its strength (K3).
            log_event(log, "error", "purge.bad_key", "stored key refused; file kept", file_id=str(facts.file_id))
            report.results["bad_key"] += 1

    done = _Done()
    failure: StorageError | None = None
    try:
        for start in range(0, len(planned), PURGE_CHUNK):
            with tracing.span("purge.chunk", files=len(planned[start : start + PURGE_CHUNK])):
                _remove_chunk(rt, planned[start : start + PURGE_CHUNK], done, report)
    except StorageError as exc:
        if isinstance(exc, ObjectFailed):
            raise  # a driver's delete_many returns refusals; raising one is a driver bug
        metrics.PURGE_ERRORS.inc()
        log_event(
            log,
            "warning",
            "purge.storage_error",
            "purge met a store-wide error; it will retry",
            files=len(planned),
            error=exc,
        )
        failure = exc
    metrics.PURGE_KEYS.inc(report.keys)
    report.results["objects"] += len(done.objects_only)
    report.results["refused"] += len(done.refused)
    if done.rows or done.objects_only or done.refused:
        _settle_recorded(rt, done, report)

    for result, count in report.results.items():
        metrics.PURGED_FILES.labels(result).inc(count)
    duration = time.monotonic() - started
    metrics.PURGE_DURATION.observe(duration)
    tracing.count(files=len(ids), keys=report.keys, rows_removed=report.results["row"], refused=len(done.refused))
    log_event(
        log,
        "info",
        "purge.done",
        "purge done",
        files=len(ids),
        key_count=report.keys,
        rows_removed=report.results["row"],
        objects_only=report.results["objects"],
        refused=report.results["refused"],
        held=report.results["held"],
        duration_s=round(duration, 4),
    )
    if failure is not None:
        raise failure
    return report


def _remove_chunk(
    rt: Runtime, chunk: list[tuple[list[FileObjects], PurgeFacts, PurgeAction]], done: _Done, report: PurgeReport
) -> None:
    """Ask the rule for a chunk, right before its keys go (a committed clearance is the point of no return),
    then remove what it freed."""
    clearance = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, [facts.file_id for _, facts, _ in chunk], Reach.FILE, rt.clock.now()),
        name="purge.clear",
    )
    for why in set(clearance.kept.values()):
        kept = [file_id for file_id, reason in clearance.kept.items() if reason is why]
        report.results[_KEPT_AS.get(why, "kept_live")] += len(kept)
        if why is Keep.HELD:
            log_event(log, "info", "purge.deferred", "a legal hold defers the purge of some files", files=len(kept))
        else:  # a deleted file still attached or in a slot, or a live one: an internal error, logged by id (D7)
            for file_id in kept:
                log_event(log, "error", f"purge.{_KEPT_AS.get(why, 'kept_live')}", "file kept", file_id=str(file_id))
    freed = [(stored, facts, action) for stored, facts, action in chunk if facts.file_id in clearance]
    tracing.count(freed=len(freed), kept=len(chunk) - len(freed))
    removal = rt.files.remove(clearance, [objects for stored, _, _ in freed for objects in stored])
    refused = removal.refused
    done.locked.update(removal.locked)
    for stored, facts, action in freed:
        objects = stored[0]
        keys = sum(rt.files.count_keys(objects) for objects in stored)
        report.keys += keys
        if objects.file_id in refused:
            done.refused[objects.file_id] = refused[objects.file_id]
            continue
        done.keys[objects.file_id] = keys
        (done.rows if action is PurgeAction.OBJECTS_AND_ROW else done.objects_only).append(objects.file_id)
        # A direct upload's abort is repeated and confirmed later (cleanup m): a part PUT in flight while it ran
        # may still land.
        if facts.protocol == DIRECT.name and objects.parts_open and objects.upload_id and objects.object_key:
            done.direct_aborts.append((objects.upload_id, objects.file_id, objects.object_key))


def _settle_recorded(rt: Runtime, done: _Done, report: PurgeReport) -> None:
    now = rt.clock.now()
    removed, kept, overdue_ids = rt.db.unit_of_work(lambda uow: _settle(uow, rt.cfg, done, now), name="purge.rows")
    report.results["row"] += removed
    for why, file_ids in kept.items():
        if why == "held":  # a hold placed since the chunk's clearance: its objects went, the row stays
            log_event(
                log,
                "info",
                "purge.deferred",
                "a legal hold placed during the purge keeps the rows",
                files=len(file_ids),
            )
        else:
            for file_id in file_ids:
                # D7: a deleted row that is still attached or in a slot is an internal error, and a row the
                # database refuses is isolated like a key the store refuses: the row stays, the id is logged.
                log_event(log, "error", f"purge.{why}", "deleted file's row kept", file_id=str(file_id))
        report.results[why] += len(file_ids)
    _log_refused(done.refused, overdue_ids)


def _settle(
    uow: UnitOfWork, cfg: Config, done: _Done, now: datetime
) -> tuple[int, dict[str, list[uuid.UUID]], list[uuid.UUID]]:
    """Record what the store answered: the objects gone (an end event), the rows of the purged deleted files
    removed (each leaves a receipt: end events), the objects of the purged live files gone (the catch-up need
    not come back, D8 d), past failures of purged files forgotten, the refused ones recorded with their next
    attempt, and the aborted direct uploads for their second abort. Returns (rows removed, rows kept by why,
    files newly overdue)."""
    aborts_sql.record(uow.conn, done.direct_aborts, now)
    gone = done.rows + done.objects_only
    if gone:
        ends.objects_gone(uow, ObjectsGone(tuple(gone), now, dict(done.keys)))
    removed, kept = _remove_rows(uow, done.rows, now, done.keys, done.locked) if done.rows else (0, {})
    if done.objects_only:
        failures_sql.clear(uow.conn, done.objects_only)
        stores_sql.forget_copies(uow.conn, done.objects_only)  # removed from every store with the file's own
        files_sql.set_objects_purged(uow.conn, done.objects_only, now)
    if not done.refused:
        return removed, kept, []
    base, cap, delay = cfg.file.purge_retry_base, cfg.file.purge_retry_max, cfg.privacy.object_delete_delay
    previous = failures_sql.attempts_of(uow.conn, list(done.refused))
    rows = []
    for file_id, code in sorted(done.refused.items()):
        attempts = previous.get(file_id, 0) + 1
        rows.append((file_id, attempts, code, next_attempt_at(attempts, now, base, cap)))
    recorded = failures_sql.record(uow.conn, rows, now)
    newly_overdue = [
        row.file_id for row in recorded if row.warned_at is None and overdue(row.failing_since, now, delay)
    ]
    if newly_overdue:
        failures_sql.set_warned(uow.conn, newly_overdue, now)
    return removed, kept, newly_overdue


def _log_refused(refused: dict[uuid.UUID, str], overdue_ids: list[uuid.UUID]) -> None:
    if not refused:
        return
    metrics.PURGE_REFUSED_FILES.inc(len(refused))
    log_event(
        log,
        "warning",
        "purge.files_refused",
        "the store refused the objects of some files; they are retried later, the others went on",
        files=len(refused),
        codes=sorted(set(refused.values())),
    )
    for file_id in overdue_ids:
        # The operator's cue: the store keeps refusing this file past the promised delay (D15: the id only).
        log_event(
            log,
            "warning",
            "purge.file_overdue",
            "a deleted file's objects are still refused past privacy.object_delete_delay",
            file_id=str(file_id),
            error=refused[file_id],
        )


def _remove_rows(
    uow: UnitOfWork,
    row_ids: list[uuid.UUID],
    now: datetime,
    keys_deleted: dict[uuid.UUID, int],
    keys_locked: dict[uuid.UUID, int],
) -> tuple[int, dict[str, list[uuid.UUID]]]:
    """The re-check before a row goes (D7): under the rows' locks, the rule again. A row still attached or in a
    slot (an internal error), or covered by a hold placed since the chunk's clearance, stays."""
    files_sql.lock_files(uow.conn, row_ids)
    kept: dict[str, list[uuid.UUID]] = {}
    removable = []
    for facts in keeps_sql.byte_facts(uow.conn, row_ids):
        why = keep(facts, Reach.FILE)
        if why is None and facts.exists and facts.deleted:
            removable.append(facts.file_id)
        elif why is not None:
            kept.setdefault(_KEPT_AS.get(why, "kept_live"), []).append(facts.file_id)
    removed, refused = _delete_isolated(uow, removable, keys_deleted, keys_locked)
    if refused:
        kept["row_refused"] = refused
    if removed:
        ends.rows_removed(uow, RowsRemoved(tuple(removed), now))
    return len(removed), kept


def _delete_isolated(
    uow: UnitOfWork, file_ids: list[uuid.UUID], keys_deleted: dict[uuid.UUID, int], keys_locked: dict[uuid.UUID, int]
) -> tuple[list[RemovedRow], list[uuid.UUID]]:
    """Delete the rows in one statement; when the database refuses it (a constraint: a row another table
    still references), once per row, each in a savepoint of its own, so one row never strands its batch (D7).
    Returns (the rows removed, the rows refused)."""
    if not file_ids:
        return [], []
    try:
        with uow.savepoint():
            return files_sql.delete_rows(uow.conn, file_ids, keys_deleted, keys_locked), []
    except psycopg.IntegrityError:
        pass
    removed: list[RemovedRow] = []
    refused: list[uuid.UUID] = []
    for file_id in file_ids:
        try:
            with uow.savepoint():
                removed += files_sql.delete_rows(uow.conn, [file_id], keys_deleted, keys_locked)
        except psycopg.IntegrityError:
            refused.append(file_id)
    return removed, refused
