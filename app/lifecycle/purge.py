# Purge is irreversible. It reads facts without a transaction, deletes objects outside every transaction
# (D4 K1), and removes a row only after re-checking under its lock that it is still deleted and not attached
# (D7). A missing object counts as deleted. A file whose objects the store refused is isolated and retried
# later with backoff, so it never strands the others; a store-wide error is raised, so the job retries and
# nothing is lost. It never lists the store and never touches another file's objects (K2, K3). A file a legal
# hold covers is deferred: the purge reads the holds of its files at execution, right before any object goes
# (and again under the row lock before its row goes), and leaves a held one whole (issue 27, D19); the
# release purges it.
"""purge_objects (D7): the objects of many files in batches, then their rows in one transaction."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Sequence

import psycopg

from app.platform.observability import metrics
from app.db import aborts as aborts_sql
from app.db import files as files_sql
from app.db import holds as holds_sql
from app.db import purge_failures as failures_sql
from app.domain.keys import KeyError_
from app.domain.purge_plan import PurgeAction, PurgeFacts, has_parts, object_keys_of, plan_purge, tail_keys_of
from app.domain.purge_retry import next_attempt_at, overdue
from app.errors import ObjectFailed, StorageError
from app.lifecycle import webhooks
from app.platform.observability.logs import log_event
from app.storage.base import MultipartRef

if TYPE_CHECKING:  # the services' collaborators (issue 22: typed at every service boundary)
    from app.platform.runtime import Runtime

log = logging.getLogger("lethe.purge")


@dataclass
class PurgeReport:
    """What one purge run did, as counts (D15: no keys, no names)."""

    results: Counter = field(default_factory=Counter)
    keys: int = 0


def read_facts(db, file_ids: Sequence[uuid.UUID]) -> list[PurgeFacts]:
    rows = {row.id: row for row in db.read(lambda conn: files_sql.purge_facts(conn, file_ids))}
    facts = []
    for file_id in file_ids:
        row = rows.get(file_id)
        if row is None:
            facts.append(PurgeFacts(file_id=file_id, exists=False))
            continue
        facts.append(PurgeFacts(file_id=file_id, exists=True, deleted_at=row.deleted_at,
                                upload_state=row.upload_state, scan_status=row.scan_status,
                                object_key=row.object_key, session_state=row.session_state,
                                storage_upload_id=row.storage_upload_id, part_count=row.part_count or 0,
                                protocol=row.protocol))
    return facts


def purge_files(rt: Runtime, file_ids: Sequence[uuid.UUID | str]) -> PurgeReport:
    """Purge many files: plan each, delete all their objects with batched deletes, abort their unfinished
    uploads, then remove the rows of the deleted ones in one transaction with a re-check per row.

    A file whose objects the store refused (one key, one upload) is isolated: the others go on, and it is
    recorded in purge_failures with its next attempt, which the cleanup's catch-up honours (D7, D8 d).

    Raises:
        StorageError: a store-wide failure (unreachable, timed out, 5xx); no row was removed, the job
            retries and the catch-up step stops.
    """
    started = time.monotonic()
    ids = sorted({uuid.UUID(str(file_id)) for file_id in file_ids})
    report = PurgeReport()
    keys_of: dict[uuid.UUID, list[str]] = {}
    purgeable: list[tuple[PurgeFacts, PurgeAction]] = []
    for facts in read_facts(rt.db, ids):
        action = plan_purge(facts)
        if action is PurgeAction.NOTHING:
            report.results["nothing"] += 1
            continue
        try:
            keys_of[facts.file_id] = object_keys_of(facts.file_id, facts.object_key) + tail_keys_of(facts)
        except KeyError_:
            # A stored key that is not this file's original: delete nothing on its strength (K3).
            log_event(log, "error", "purge.bad_key", "stored key refused; file kept", file_id=str(facts.file_id))
            report.results["bad_key"] += 1
            continue
        purgeable.append((facts, action))
    purgeable = _without_held(rt, purgeable, report)
    keys_of = {facts.file_id: keys_of[facts.file_id] for facts, _ in purgeable}

    owner = {key: file_id for file_id, keys in keys_of.items() for key in keys}
    refused: dict[uuid.UUID, str] = {}
    try:
        for failure in rt.store.delete_many(owner):
            refused.setdefault(owner[failure.key], failure.code or "refused")
        for facts, _ in purgeable:
            if has_parts(facts) and facts.file_id not in refused:
                try:
                    rt.store.abort_upload(MultipartRef(str(facts.file_id), facts.object_key or "",
                                                       facts.storage_upload_id), facts.part_count)
                except ObjectFailed as exc:
                    refused[facts.file_id] = exc.store_code or "refused"
    except StorageError as exc:
        if isinstance(exc, ObjectFailed):
            raise  # a driver's delete_many returns refusals; raising one is a driver bug
        metrics.PURGE_ERRORS.inc()
        log_event(log, "warning", "purge.storage_error", "purge met a store-wide error; it will retry",
                  files=len(purgeable), error=exc)
        raise
    report.keys = len(owner)
    metrics.PURGE_KEYS.inc(len(owner))

    done = [(facts, action) for facts, action in purgeable if facts.file_id not in refused]
    row_ids = [facts.file_id for facts, action in done if action is PurgeAction.OBJECTS_AND_ROW]
    objects_only = [facts.file_id for facts, action in done if action is PurgeAction.OBJECTS]
    report.results["objects"] += len(objects_only)
    report.results["refused"] += len(refused)
    if row_ids or objects_only or refused:
        now = rt.clock.now()
        # Keys for the receipt: the object keys, and the parts where they are objects of their own (fs; S3
        # parts go with their multipart upload's abort).
        keys_deleted = {facts.file_id: len(keys_of[facts.file_id])
                        + (len(rt.store.part_keys(str(facts.file_id), facts.part_count)) if has_parts(facts) else 0)
                        for facts, _ in done}
        # A direct upload's abort is repeated and confirmed later (cleanup m, issue 26): a part PUT in flight
        # while it ran may still land.
        aborts = [(facts.storage_upload_id, facts.file_id, facts.object_key) for facts, _ in done
                  if facts.protocol == "direct" and has_parts(facts) and facts.storage_upload_id and facts.object_key]
        removed, kept, overdue_ids = rt.db.unit_of_work(
            lambda uow: _settle(uow, rt.cfg, row_ids, objects_only, refused, now, keys_deleted, aborts),
            name="purge.rows")
        report.results["row"] += removed
        for why, file_ids in kept.items():
            if why == "held":  # a hold placed since the check: its objects went, the row stays until the release
                log_event(log, "info", "purge.deferred", "a legal hold placed during the purge keeps the rows",
                          files=len(file_ids))
                report.results[why] += len(file_ids)
                continue
            for file_id in file_ids:
                # D7: a deleted row that is still attached or held is an internal error, and a row the database
                # refuses is isolated like a key the store refuses: the row stays, the id is logged, the others go.
                log_event(log, "error", f"purge.{why}", "deleted file's row kept", file_id=str(file_id))
            report.results[why] += len(file_ids)
        _log_refused(refused, overdue_ids)

    for result, count in report.results.items():
        metrics.PURGED_FILES.labels(result).inc(count)
    duration = time.monotonic() - started
    metrics.PURGE_DURATION.observe(duration)
    log_event(log, "info", "purge.done", "purge done", files=len(ids), key_count=report.keys,
              rows_removed=report.results["row"], objects_only=report.results["objects"],
              refused=report.results["refused"], duration_s=round(duration, 4))
    return report


def _without_held(rt: Runtime, purgeable: list[tuple[PurgeFacts, PurgeAction]],
                  report: PurgeReport) -> list[tuple[PurgeFacts, PurgeAction]]:
    """The check at execution (issue 27, D19): leave out the files an active legal hold covers, read right
    before any object is deleted and not when the job was queued. No lock is held across the store calls
    (K1): a hold committed after this read does not stop this purge's deletes, and the re-check under the row
    lock in _remove_rows keeps such a row until the release."""
    if not purgeable:
        return purgeable
    held = rt.db.read(lambda conn: holds_sql.held_among(conn, [facts.file_id for facts, _ in purgeable]))
    if held:
        report.results["held"] += len(held)
        log_event(log, "info", "purge.deferred", "a legal hold defers the purge of some files", files=len(held))
    return [(facts, action) for facts, action in purgeable if facts.file_id not in held]


def _settle(uow, cfg, row_ids: list[uuid.UUID], objects_only: list[uuid.UUID], refused: dict[uuid.UUID, str],
            now: datetime, keys_deleted: dict[uuid.UUID, int],
            aborts: Sequence[tuple[str, uuid.UUID, str]] = ()) -> tuple[int, dict[str, list[uuid.UUID]], list[uuid.UUID]]:
    """Remove the rows of the purged deleted files (each leaves a receipt), mark the objects of the purged
    live files gone (the catch-up need not come back, D8 d), forget past failures of purged files, record
    the refused ones with their next attempt, and the aborted direct uploads for their second abort. Returns
    (rows removed, rows kept by why, files newly overdue)."""
    aborts_sql.record(uow.conn, aborts, now)
    removed, kept = _remove_rows(uow, cfg, row_ids, now, keys_deleted) if row_ids else (0, {})
    if objects_only:
        failures_sql.clear(uow.conn, objects_only)
        files_sql.set_objects_purged(uow.conn, objects_only, now)
    if not refused:
        return removed, kept, []
    base, cap, delay = cfg.file.purge_retry_base, cfg.file.purge_retry_max, cfg.privacy.object_delete_delay
    previous = failures_sql.attempts_of(uow.conn, list(refused))
    rows = []
    for file_id, code in sorted(refused.items()):
        attempts = previous.get(file_id, 0) + 1
        rows.append((file_id, attempts, code, next_attempt_at(attempts, now, base, cap)))
    recorded = failures_sql.record(uow.conn, rows, now)
    newly_overdue = [row.file_id for row in recorded
                     if row.warned_at is None and overdue(row.failing_since, now, delay)]
    if newly_overdue:
        failures_sql.set_warned(uow.conn, newly_overdue, now)
    return removed, kept, newly_overdue


def _log_refused(refused: dict[uuid.UUID, str], overdue_ids: list[uuid.UUID]) -> None:
    if not refused:
        return
    metrics.PURGE_REFUSED_FILES.inc(len(refused))
    log_event(log, "warning", "purge.files_refused", "the store refused the objects of some files; they are retried later, the others went on",
              files=len(refused), codes=sorted(set(refused.values())))
    for file_id in overdue_ids:
        # The operator's cue: the store keeps refusing this file past the promised delay (D15: the id only).
        log_event(log, "warning", "purge.file_overdue", "a deleted file's objects are still refused past privacy.object_delete_delay",
                  file_id=str(file_id), error=refused[file_id])


def _remove_rows(uow, cfg, row_ids: list[uuid.UUID], now: datetime,
                 keys_deleted: dict[uuid.UUID, int]) -> tuple[int, dict[str, list[uuid.UUID]]]:
    checked = files_sql.lock_deleted_unattached(uow.conn, row_ids)
    kept: dict[str, list[uuid.UUID]] = {
        "kept_attached": [row.id for row in checked if row.deleted and row.attached],
        "kept_held": [row.id for row in checked if row.deleted and row.held and not row.attached],
        "held": [row.id for row in checked if row.deleted and row.on_hold and not row.held and not row.attached],
    }
    removable = [row.id for row in checked if row.deleted and not row.attached and not row.held and not row.on_hold]
    removed, kept["row_refused"] = _delete_isolated(uow, removable, now, keys_deleted)
    # After the commit only, by construction: the messages ride this transaction's outbox (issue 28).
    webhooks.record_file_purged(uow, cfg, [row.id for row in removed], now)

    def observe() -> None:
        for row in removed:
            metrics.DELETE_TO_GONE.observe(max((now - row.deleted_at).total_seconds(), 0.0))

    uow.after_commit_metric(observe)
    return len(removed), {why: ids for why, ids in kept.items() if ids}


def _delete_isolated(uow, file_ids: list[uuid.UUID], now: datetime,
                     keys_deleted: dict[uuid.UUID, int]) -> tuple[list[Any], list[uuid.UUID]]:
    """Delete the rows in one statement; when the database refuses it (a constraint: a row another table
    still references), once per row, each in a savepoint of its own, so one row never strands its batch (D7).
    Returns (the rows removed: ids and deletion marks, the rows refused)."""
    if not file_ids:
        return [], []
    try:
        with uow.savepoint():
            return files_sql.delete_rows(uow.conn, file_ids, now, keys_deleted), []
    except psycopg.IntegrityError:
        pass
    removed: list[Any] = []
    refused: list[uuid.UUID] = []
    for file_id in file_ids:
        try:
            with uow.savepoint():
                removed += files_sql.delete_rows(uow.conn, [file_id], now, keys_deleted)
        except psycopg.IntegrityError:
            refused.append(file_id)
    return removed, refused
