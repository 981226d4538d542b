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
from dataclasses import replace
from typing import TYPE_CHECKING

from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import sessions as sessions_sql
from app.db.files import FileRow
from app.domain.ends import Reach
from app.domain.image_metadata import STRIPPED_TYPES, Mode, strip
from app.domain.objects import FileObjects
from app.domain.sealing import plain_size_of
from app.errors import ContentCorrupt, NotFound, StorageError
from app.platform.observability.logs import log_event
from app.storage.base import OBJECT_LOCKED

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
    mode = rt.content.strip_metadata
    if (
        mode == "none"
        or row.metadata_stripped is not None
        or row.detected_type not in STRIPPED_TYPES
        or row.object_key is None
        or row.size_bytes > rt.content.image_max_size
    ):
        return row
    try:
        chunks = rt.files.read(row)  # a first segment that does not open raises here already
        try:
            data = b"".join(chunks)
        finally:
            chunks.close()
    except ContentCorrupt:
        return row  # the scan meets it too, and ends the file at once
    except NotFound:
        now = _reread(rt, row)
        if now.object_key != row.object_key:
            return now  # another run of this job replaced it (or the file went)
        return _adopt_stripped(rt, row, mode)
    sent = hashlib.sha256(data).hexdigest()
    if row.sha256 is None:  # a direct upload: its declared digest is checked on the bytes as sent, first
        session = rt.db.read(lambda conn: sessions_sql.session_of(conn, row.id))
        expected = getattr(session, "expected_sha256", None)
        if expected and expected != sent:
            return row  # the scan fails it (checksum_mismatch) on the bytes the store holds
    stripped = strip(data, row.detected_type, mode)
    if stripped is None:
        # Bytes its reader cannot follow to their end: nobody can say what they hold. Not recorded, so inline
        # display keeps to the preview (image.strip_original), as for a type that is not stripped.
        log_event(log, "info", "strip.unreadable", "an image's original was left as it was sent", file_id=str(row.id))
        return row
    was = row.object_key
    if stripped is data:  # nothing of what the mode removes: recorded, with the digest of what was read
        rt.db.unit_of_work(
            lambda uow: files_sql.set_stripped(uow.conn, row.id, was, was, len(data), sent, mode), name="strip.record"
        )
        return _reread(rt, row)
    key = rt.files.write_original(row, stripped)
    digest = hashlib.sha256(stripped).hexdigest()
    recorded = rt.db.unit_of_work(
        lambda uow: files_sql.set_stripped(uow.conn, row.id, was, key, len(stripped), digest, mode), name="strip.record"
    )
    after = _reread(rt, row)
    if not recorded:
        # Deleted or ended meanwhile (its purge covers orig-(r+1) too), or another run of this job recorded the
        # same key first: the key goes only if the row does not name it.
        if after.object_key != key:
            _remove(rt, row.id, [key], row.store)
        return after
    log_event(
        log,
        "info",
        "strip.done",
        "image metadata removed from the stored original",
        file_id=str(row.id),
        mode=mode,
        removed_bytes=len(data) - len(stripped),
    )
    _remove_replaced(rt, after)
    return after


def _adopt_stripped(rt: Runtime, row: FileRow, mode: Mode) -> FileRow:
    """The row names an original that is gone, and the one this step wrote after it is there: a database restored
    from a backup taken between the completion and this step. The stripped original is the file's; the row is told.
    (Without it, the row is left as it is: the scan finds the original missing, as it would have.)"""
    objects = FileObjects(row.id, row.object_key)
    files = rt.files
    found = files.in_store(row.store).head(objects.next_original)
    size = (
        None
        if found is None
        else found.size_bytes
        if not row.encrypted
        else plain_size_of(found.size_bytes, row.piece_size or 1)
    )
    if size is None:
        return row
    later = replace(row, object_key=objects.next_original, size_bytes=size)
    try:
        chunks = files.read(later)
        try:
            data = b"".join(chunks)
        finally:
            chunks.close()
    except (NotFound, ContentCorrupt):
        return row
    digest = hashlib.sha256(data).hexdigest()
    rt.db.unit_of_work(
        lambda uow: files_sql.set_stripped(
            uow.conn, row.id, row.object_key or "", objects.next_original, len(data), digest, mode
        ),
        name="strip.adopt",
    )
    log_event(
        log,
        "info",
        "strip.adopted",
        "a restored row now names the original stored without its metadata",
        file_id=str(row.id),
    )
    return _reread(rt, row)


def _reread(rt: Runtime, row: FileRow) -> FileRow:
    """The row as it stands now; a row gone (purged) as one that names no original."""
    found = rt.db.read(lambda conn: files_sql.file_by_id(conn, row.id))
    return found if found is not None else replace(row, object_key=None)


def _remove_replaced(rt: Runtime, row: FileRow) -> None:
    """Remove the originals the row's own replaced (orig-1..orig-(r-1)): they hold what was stripped."""
    replaced = FileObjects(row.id, row.object_key).replaced_originals
    if replaced:
        _remove(rt, row.id, replaced, row.store)


def _remove(rt: Runtime, file_id: uuid.UUID, keys: list[str], store: str) -> None:
    cleared = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, [file_id], Reach.STRAY, rt.clock.now()), name="strip.clear"
    )
    failures = rt.files.remove_keys(cleared, {file_id: keys}, store=store)
    # A version a bucket's object lock keeps stays until its date (a delete marker hides it): only sealed files
    # are stored in such a bucket, under a key Lethe destroys with the file, as for every locked version.
    if any(failure.code != OBJECT_LOCKED for failure in failures):
        raise StorageError("an earlier original could not be removed")
