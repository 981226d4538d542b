"""The scan's first step: an image's original stored again without the metadata image.strip_metadata removes.

It runs before a file is deliverable, for every way its bytes came in (the api's parts, tus, a direct upload), so
that no download, link, redirect or variant can serve a location. The uploader's declared sha256 was checked on
the bytes as sent (at the completion, or here first for a direct upload whose completion left it to the scan); the
row then carries the size and sha256 of what is stored. The new original is `orig-(r+1)`, which the file's purge
already covers, and is referenced in one short transaction; the one it replaces goes right after (a failure is
retried by the scan job, which removes every older revision before anything else).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from typing import TYPE_CHECKING, cast

from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import sessions as sessions_sql
from app.db.files import FileRow
from app.domain.ends import Scope
from app.domain.image_metadata import STRIPPED_TYPES, Mode, strip
from app.domain.objects import FileObjects
from app.errors import ContentCorrupt, StorageError
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.strip")


def strip_original(rt: Runtime, row: FileRow) -> FileRow:
    """Store the original of a file waiting for its scan without its metadata, once; returns the row as it then
    stands (unchanged when there is nothing to do).

    Raises:
        StorageError: the store did not take the new original or did not remove the old one (the job retries).
        KeyUnavailable: the file's key cannot be opened (the job retries).
    """
    _remove_replaced(rt, row)
    mode = cast(Mode, rt.cfg.image.strip_metadata)
    if mode == "none" or row.metadata_stripped is not None or row.detected_type not in STRIPPED_TYPES \
            or row.object_key is None or row.size_bytes > rt.cfg.image.max_size:
        return row
    chunks = rt.files.read(row)
    try:
        data = b"".join(chunks)
    except ContentCorrupt:
        return row  # the scan meets it too, and ends the file
    finally:
        chunks.close()
    sent = hashlib.sha256(data).hexdigest()
    if row.sha256 is None:  # a direct upload: its declared digest is checked on the bytes as sent, first
        session = rt.db.read(lambda conn: sessions_sql.session_of(conn, row.id))
        expected = getattr(session, "expected_sha256", None)
        if expected and expected != sent:
            return row  # the scan fails it (checksum_mismatch) on the bytes the store holds
    stripped = strip(data, row.detected_type, mode)
    if stripped is None:  # nothing of what the mode removes: recorded, with the digest of what was read
        rt.db.unit_of_work(lambda uow: files_sql.set_stripped(uow.conn, row.id, row.object_key or "", row.object_key
                                                              or "", len(data), sent, mode), name="strip.record")
        return _reread(rt, row)
    key = rt.files.write_original(row, stripped)
    digest = hashlib.sha256(stripped).hexdigest()
    recorded = rt.db.unit_of_work(lambda uow: files_sql.set_stripped(uow.conn, row.id, row.object_key or "", key,
                                                                     len(stripped), digest, mode),
                                  name="strip.record")
    if not recorded:  # deleted or ended meanwhile: the new original is nobody's (its purge also covers it)
        _remove(rt, row.id, [key])
        return _reread(rt, row)
    log_event(log, "info", "strip.done", "image metadata removed from the stored original", file_id=str(row.id),
              mode=mode, removed_bytes=len(data) - len(stripped))
    after = _reread(rt, row)
    _remove_replaced(rt, after)
    return after


def _reread(rt: Runtime, row: FileRow) -> FileRow:
    return rt.db.read(lambda conn: files_sql.file_by_id(conn, row.id)) or row


def _remove_replaced(rt: Runtime, row: FileRow) -> None:
    """Remove the originals the row's own replaced (orig-1..orig-(r-1)): they hold what was stripped."""
    replaced = FileObjects(row.id, row.object_key).replaced_originals
    if replaced:
        _remove(rt, row.id, replaced)


def _remove(rt: Runtime, file_id: uuid.UUID, keys: list[str]) -> None:
    cleared = rt.db.unit_of_work(lambda uow: keeps_sql.clearance(uow, [file_id], Scope.STRAY, rt.clock.now()),
                                 name="strip.clear")
    failures = rt.files.remove_keys(cleared, {file_id: keys})
    if failures:
        raise StorageError("an earlier original could not be removed")
