# A variant never outlives its file. Its row is recorded ('writing') under the file's row lock, in a transaction
# that checks the file is still live, before its object is written; the purge deletes every variant name of the
# key schema whatever the rows say. After the write, a second transaction under the row lock makes the variants
# ready only if the file is still live; if it was deleted or purged meanwhile (the write may have landed after
# the purge), the variants just written are removed at once, through the one rule for bytes (a legal hold keeps
# them, and the purge after its release takes them). No store call runs inside a transaction (K1).
"""Image variants of a deliverable file (thumb-small, thumb-large, preview, and a poster for an animation):
made by the imaging port, written without metadata, recorded and served beside the original."""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING

from app.content import imaging
from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import variants as variants_sql
from app.db.events import announce_settled, write_file_updated
from app.db.files import FileRow
from app.db.uow import UnitOfWork
from app.domain.ends import FilesSettled, Reach
from app.domain.keys import VARIANTS
from app.domain.objects import FileObjects
from app.domain.states import is_deliverable
from app.domain.variants import VARIANT_TYPE, Made
from app.domain.webhooks import FILE_VARIANTS_READY
from app.errors import ContentCorrupt, NotFound, ObjectFailed
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.variants")


def _live(row: FileRow | None) -> bool:
    return row is not None and row.deleted_at is None and is_deliverable(row.upload_state, row.scan_status)


def make_variants(rt: Runtime, file_id: uuid.UUID) -> str | None:
    """Make, record and write the variants of one file, or record why it gets none.

    Returns:
        `ready`, `refused`, or None when there was nothing to do (the file is gone, deleted, or its variants
        were settled before).

    Raises:
        StorageError: the store failed; the job retries (a retry of a file that ended meanwhile removes what
            the failed try may have written).
    """
    row = rt.db.read(lambda conn: files_sql.file_by_id(conn, file_id))
    if row is None or row.deleted_at is not None:
        remove_variants(rt, file_id)  # a try before this one may have written some after the purge
        return None
    if not _live(row) or row.variants_state != "pending" or row.object_key is None:
        return None
    started = time.monotonic()
    made = _made(rt, row)
    if isinstance(made, imaging.Refused):
        written = rt.db.unit_of_work(lambda uow: _settle_refused(uow, file_id, made.reason, rt), name="variants.refuse")
        if written:
            metrics.VARIANTS.labels(made.reason).inc()
            log_event(
                log, "info", "variants.refused", "the file gets no variants", file_id=str(file_id), reason=made.reason
            )
        return "refused" if written else None
    names = [variant.name for variant in made]
    if not rt.db.unit_of_work(lambda uow: _record_writing(uow, file_id, names, rt), name="variants.record"):
        return None  # deleted (or settled) since it was read: nothing was written
    for variant in made:
        rt.files.write_variant(row, variant.name, variant.data, variant.content_type)  # sealed as its original is
    if rt.db.unit_of_work(lambda uow: _settle_ready(uow, file_id, made, rt), name="variants.ready"):
        metrics.VARIANTS.labels("ready").inc()
        log_event(
            log,
            "info",
            "variants.ready",
            "variants made",
            file_id=str(file_id),
            variants=len(made),
            duration_s=round(time.monotonic() - started, 4),
        )
        return "ready"
    # The file was deleted, or purged, while its variants were written: they go now, unless a hold keeps them.
    remove_variants(rt, file_id)
    log_event(
        log,
        "info",
        "variants.too_late",
        "the file ended while its variants were written; they were removed",
        file_id=str(file_id),
    )
    return None


def _made(rt: Runtime, row: FileRow) -> list[Made] | imaging.Refused:
    policy = rt.content
    if row.size_bytes > policy.image_max_size:
        return imaging.Refused("too_large")  # never read into memory
    try:
        chunks = rt.files.read(row)
        try:
            data = b"".join(chunks)
        finally:
            chunks.close()
    except (NotFound, ContentCorrupt):
        # Content missing, or sealed bytes that do not open: the download answers 410 content_missing or 502.
        return imaging.Refused("undecodable")
    return imaging.make_variants(
        data, policy.sizes, policy.image_max_size, policy.image_max_pixels, policy.image_timeout.total_seconds()
    )


def _record_writing(uow: UnitOfWork, file_id: uuid.UUID, names: list[str], rt: Runtime) -> bool:
    locked = files_sql.lock_file(uow.conn, file_id)
    if not _live(locked) or locked is None or locked.variants_state != "pending":
        return False
    variants_sql.record_writing(uow.conn, file_id, names, VARIANT_TYPE, rt.clock.now())
    return True


def _settle_ready(uow: UnitOfWork, file_id: uuid.UUID, made: list[Made], rt: Runtime) -> bool:
    locked = files_sql.lock_file(uow.conn, file_id)
    if not _live(locked) or locked is None or locked.variants_state != "pending":
        return False
    now = rt.clock.now()
    variants_sql.record_ready(uow.conn, file_id, made, now)
    write_file_updated(uow, file_id, None, now)  # its thumbnails changed: the uploader's clients hear of it
    names = tuple(sorted(one.name for one in made))
    announce_settled(uow, FilesSettled(FILE_VARIANTS_READY, (file_id,), now, variants=names))
    return True


def _settle_refused(uow: UnitOfWork, file_id: uuid.UUID, reason: str, rt: Runtime) -> bool:
    locked = files_sql.lock_file(uow.conn, file_id)
    if not _live(locked) or locked is None or locked.variants_state != "pending":
        return False
    variants_sql.record_refused(uow.conn, file_id, reason, rt.clock.now())
    return True


def remove_variants(rt: Runtime, file_id: uuid.UUID) -> None:
    """Remove every variant object of a file that ended (deleted, or its row purged), if the one rule frees its
    bytes: a late write after the purge leaves nothing. A missing object is removed."""
    clearance = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, [file_id], Reach.FILE, rt.clock.now(), begins_removal=False),
        name="variants.clear",
    )
    if file_id not in clearance:
        return
    objects = FileObjects(file_id)
    keys = {file_id: [objects.variant(name) for name in VARIANTS]}
    # The row that named its store may be gone: every store (four keys each; a missing object is removed).
    failures = [failure for name in rt.store_names for failure in rt.files.remove_keys(clearance, keys, store=name)]
    if failures:
        raise ObjectFailed("the store refused a variant's removal", store_code=failures[0].code)
