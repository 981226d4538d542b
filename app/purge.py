# Purge is irreversible. It reads facts without a transaction, deletes objects outside every transaction
# (D4 K1), and removes a row only after re-checking under its lock that it is still deleted and not attached
# (D7). A missing object counts as deleted; the first storage error is raised, so the job retries and
# nothing is lost. It never lists the store and never touches another file's objects (K2, K3).
"""purge_objects (D7): the objects of many files in batches, then their rows in one transaction."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from app import metrics
from app.db import files as files_sql
from app.domain.keys import KeyError_
from app.domain.purge_plan import PurgeAction, PurgeFacts, has_parts, object_keys_of, plan_purge
from app.errors import StorageError

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
                                storage_upload_id=row.storage_upload_id, part_count=row.part_count or 0))
    return facts


def purge_files(rt, file_ids: Sequence[uuid.UUID | str]) -> PurgeReport:
    """Purge many files: plan each, delete all their objects with batched deletes, abort their unfinished
    uploads, then remove the rows of the deleted ones in one transaction with a re-check per row.

    Raises:
        StorageError: the first storage error; no row was removed, the job retries.
    """
    started = time.monotonic()
    ids = sorted({uuid.UUID(str(file_id)) for file_id in file_ids})
    report = PurgeReport()
    plans: list[tuple[PurgeFacts, PurgeAction]] = []
    for facts in read_facts(rt.db, ids):
        action = plan_purge(facts)
        if action is PurgeAction.NOTHING:
            report.results["nothing"] += 1
        else:
            plans.append((facts, action))

    keys: list[str] = []
    purgeable: list[tuple[PurgeFacts, PurgeAction]] = []
    for facts, action in plans:
        try:
            keys.extend(object_keys_of(facts.file_id, facts.object_key))
        except KeyError_:
            # A stored key that is not this file's original: delete nothing on its strength (K3).
            log.error("stored key refused; file kept", extra={"event": "purge.bad_key", "file_id": str(facts.file_id)})
            report.results["bad_key"] += 1
            continue
        purgeable.append((facts, action))
    try:
        rt.store.delete_many(keys)
        for facts, _ in purgeable:
            if has_parts(facts):
                rt.store.abort_upload(str(facts.file_id), facts.object_key, facts.storage_upload_id,
                                      facts.part_count)
    except StorageError:
        metrics.PURGE_ERRORS.inc()
        log.warning("purge met a storage error; it will retry",
                    extra={"event": "purge.storage_error", "files": len(purgeable)})
        raise
    report.keys = len(keys)
    metrics.PURGE_KEYS.inc(len(keys))

    row_ids = [facts.file_id for facts, action in purgeable if action is PurgeAction.OBJECTS_AND_ROW]
    report.results["objects"] += sum(1 for _, action in purgeable if action is PurgeAction.OBJECTS)
    if row_ids:
        removed, kept = rt.db.unit_of_work(lambda uow: _remove_rows(uow, row_ids), name="purge.rows")
        report.results["row"] += removed
        for file_id in kept:
            # D7: an attached deleted row is an internal error: the row stays, the id is logged.
            log.error("deleted file is still attached; row kept",
                      extra={"event": "purge.kept_attached", "file_id": str(file_id)})
        report.results["kept_attached"] += len(kept)

    for result, count in report.results.items():
        metrics.PURGED_FILES.labels(result).inc(count)
    duration = time.monotonic() - started
    metrics.PURGE_DURATION.observe(duration)
    log.info("purge done", extra={"event": "purge.done", "files": len(ids), "keys": report.keys,
                                  "rows_removed": report.results["row"], "objects_only": report.results["objects"],
                                  "duration_s": round(duration, 4)})
    return report


def _remove_rows(uow, row_ids: list[uuid.UUID]) -> tuple[int, list[uuid.UUID]]:
    checked = files_sql.lock_deleted_unattached(uow.conn, row_ids)
    removable = [row.id for row in checked if row.deleted and not row.attached]
    kept = [row.id for row in checked if row.deleted and row.attached]
    removed = files_sql.delete_rows(uow.conn, removable) if removable else 0
    return removed, kept
