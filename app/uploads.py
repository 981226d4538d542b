# Uploads write objects before the rows that reference them and never inside a transaction (D4 K1): each
# store call runs between units of work, and a unit of work re-checks under the file's row lock what the
# earlier read saw. When recording fails, what was written is removed.
"""Resumable uploads (D13): create, put a part, complete, show, abort."""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO

from app.auth import Principal
from app.db import files as files_sql
from app.db import sessions as sessions_sql
from app.domain import keys
from app.domain.uploads import expected_part_size, part_count
from app.errors import Conflict, Forbidden, Gone, Invalid, NotFound, StorageError, TooLarge
from app.events import write_file_updated
from app.jobs import enqueue_purge, enqueue_scan
from app.storage.base import UploadedPart

log = logging.getLogger("lethe.uploads")
RESTRICTED_PURPOSES = ("branding", "gdpr_export")  # written by operators and the application, not users


@dataclass(frozen=True)
class NewUpload:
    name: str
    size_bytes: int
    mime_type: str
    purpose: str = "attachment"
    sha256: str | None = None
    scope_id: uuid.UUID | None = None


@dataclass(frozen=True)
class UploadView:
    file: object
    session: object
    parts: list


def _visible_upload(conn, principal: Principal, file_id: uuid.UUID, lock: bool = False):
    """The file and session of the caller's own live upload, else NotFound (someone else's, unknown or
    deleted are the same 404)."""
    row = (files_sql.lock_file if lock else files_sql.file_by_id)(conn, file_id)
    if row is None or row.deleted_at is not None or row.uploaded_by != principal.id:
        raise NotFound()
    session = (sessions_sql.lock_session if lock else sessions_sql.session_of)(conn, file_id)
    if session is None:
        raise NotFound()
    return row, session


def _require_write(principal: Principal) -> None:
    if not principal.has("files:write"):
        raise Forbidden()


def create_upload(rt, principal: Principal, new: NewUpload) -> UploadView:
    """Create a file and its session; the object store's multipart upload is begun first (S3), so that the
    row never names an upload that does not exist."""
    _require_write(principal)
    if new.purpose in RESTRICTED_PURPOSES and not principal.is_manager:
        raise Forbidden()
    if new.size_bytes > rt.cfg.file.max_size:
        raise TooLarge()
    file_id = uuid.uuid4()
    object_key = keys.original_key(file_id, 1)
    part_size = rt.cfg.file.part_size
    upload_id = rt.store.begin_upload(str(file_id), object_key, new.mime_type)
    now = rt.clock.now()

    def record(uow):
        files_sql.insert_file(uow.conn, {
            "id": file_id, "uploaded_by": principal.id, "purpose": new.purpose, "original_name": new.name,
            "mime_type": new.mime_type, "size_bytes": new.size_bytes, "scope_id": new.scope_id,
            "object_key": object_key, "created_at": now,
        })
        sessions_sql.insert_session(uow.conn, {
            "file_id": file_id, "part_size": part_size, "part_count": part_count(new.size_bytes, part_size),
            "storage_upload_id": upload_id, "expected_sha256": new.sha256, "created_at": now,
            "expires_at": now + timedelta(seconds=rt.cfg.file.upload_session_ttl),
        })
        return _view(uow.conn, file_id)

    try:
        view = rt.db.unit_of_work(record, name="upload.create")
    except Exception:
        rt.store.abort_upload(str(file_id), object_key, upload_id, 0)
        raise
    log.info("upload created", extra={"event": "upload.created", "file_id": str(file_id),
                                      "part_count": view.session.part_count})
    return view


def _view(conn, file_id: uuid.UUID) -> UploadView:
    return UploadView(files_sql.file_by_id(conn, file_id), sessions_sql.session_of(conn, file_id),
                      sessions_sql.parts_of(conn, file_id))


def get_upload(rt, principal: Principal, file_id: uuid.UUID) -> UploadView:
    def read(conn):
        _visible_upload(conn, principal, file_id)
        return _view(conn, file_id)

    return rt.db.read(read)


def _check_open(session, now) -> None:
    """An upload takes parts and completion only while open and before expires_at (D8: expired at
    expires_at exactly)."""
    if session.state == "expired" or (session.state == "open" and now >= session.expires_at):
        raise Gone("upload_expired")
    if session.state != "open":
        raise Conflict("upload_not_open")


def put_part(rt, principal: Principal, file_id: uuid.UUID, part_number: int, body: BinaryIO,
             content_length: int | None) -> int:
    """Store part n of the caller's open upload. Its size must be exact: part_size, or the remainder for the
    last part.

    Returns:
        The size of the part stored.
    """
    file_row, session = rt.db.read(lambda conn: _visible_upload(conn, principal, file_id))
    _require_write(principal)
    _check_open(session, rt.clock.now())
    if not 1 <= part_number <= session.part_count:
        raise Invalid("part_number_out_of_range")
    expected = expected_part_size(file_row.size_bytes, session.part_size, part_number)
    if content_length is not None and content_length != expected:
        raise Invalid("wrong_part_size")
    data = body.read(expected + 1)
    if len(data) != expected:
        raise Invalid("wrong_part_size")
    part = rt.store.put_part(str(file_id), file_row.object_key, session.storage_upload_id, part_number, data)

    def record(uow):
        _, locked = _visible_upload(uow.conn, principal, file_id, lock=True)
        _check_open(locked, rt.clock.now())
        sessions_sql.upsert_part(uow.conn, file_id, part_number, len(data), part.etag, rt.clock.now())

    try:
        rt.db.unit_of_work(record, name="upload.part")
    except (NotFound, Gone, Conflict):
        # The upload ended while the part was being written: remove what was written (fs; an S3 part
        # belongs to the multipart upload, which its abort or purge removes).
        if rt.store.driver == "fs":
            rt.store.delete(keys.part_key(file_id, part_number))
        raise
    return len(data)


def complete_upload(rt, principal: Principal, file_id: uuid.UUID) -> object:
    """Assemble the original, verify size and sha256, and start the scan.

    Returns:
        The files row, complete.

    Raises:
        Conflict(parts_missing), Conflict(upload_not_open), Gone(upload_expired), NotFound,
        Invalid(size_mismatch | checksum_mismatch): the file is now failed.
    """
    view = rt.db.read(lambda conn: (_visible_upload(conn, principal, file_id), sessions_sql.parts_of(conn, file_id)))
    (file_row, session), parts = view
    _require_write(principal)
    _check_open(session, rt.clock.now())
    received = {part.part_number for part in parts}
    if received != set(range(1, session.part_count + 1)):
        raise Conflict("parts_missing")
    uploaded = [UploadedPart(part.part_number, part.etag) for part in parts]
    try:
        rt.store.complete_upload(str(file_id), file_row.object_key, session.storage_upload_id, uploaded)
    except StorageError:
        # A concurrent complete or abort may have finished the upload first: answer what the row says.
        _, now_session = rt.db.read(lambda conn: _visible_upload(conn, principal, file_id))
        _check_open(now_session, rt.clock.now())
        raise
    size, digest = _measure(rt.store, file_row.object_key)
    reason = None
    if size != file_row.size_bytes:
        reason = "size_mismatch"
    elif session.expected_sha256 and digest != session.expected_sha256:
        reason = "checksum_mismatch"

    def record(uow):
        row, locked = _visible_upload(uow.conn, principal, file_id, lock=True)
        _check_open(locked, rt.clock.now())
        now = rt.clock.now()
        sessions_sql.delete_parts(uow.conn, file_id)
        if reason is None:
            files_sql.set_complete(uow.conn, file_id, digest, now)
            sessions_sql.set_completed(uow.conn, file_id, now)
            write_file_updated(uow, file_id, principal.id, now)
            enqueue_scan(uow, file_id)
        else:
            files_sql.set_failed(uow.conn, file_id, now)
            sessions_sql.set_state(uow.conn, file_id, "aborted")
            write_file_updated(uow, file_id, principal.id, now)
            enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return files_sql.file_by_id(uow.conn, file_id)

    try:
        row = rt.db.unit_of_work(record, name="upload.complete")
    except (NotFound, Gone, Conflict):
        rt.store.delete(file_row.object_key)  # recording failed: remove what was written
        raise
    if reason is not None:
        log.info("upload failed verification", extra={"event": "upload.failed", "file_id": str(file_id),
                                                      "reason": reason})
        raise Invalid(reason)
    log.info("upload completed", extra={"event": "upload.completed", "file_id": str(file_id)})
    return row


def _measure(store, key: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    chunks = store.open(key)
    try:
        for chunk in chunks:
            digest.update(chunk)
            size += len(chunk)
    finally:
        chunks.close()
    return size, digest.hexdigest()


def abort_upload(rt, principal: Principal, file_id: uuid.UUID) -> None:
    """Abort the caller's open upload: the session is aborted and the file failed (one event); the parts are
    dropped by the purge job committed with the change, and at once as a best effort."""
    _require_write(principal)

    def record(uow):
        row, session = _visible_upload(uow.conn, principal, file_id, lock=True)
        if session.state == "aborted":
            return None  # a second abort changes nothing
        if session.state != "open":
            raise Conflict("upload_not_open")
        now = rt.clock.now()
        sessions_sql.set_state(uow.conn, file_id, "aborted")
        sessions_sql.delete_parts(uow.conn, file_id)
        files_sql.set_failed(uow.conn, file_id, now)
        write_file_updated(uow, file_id, principal.id, now)
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return row, session

    result = rt.db.unit_of_work(record, name="upload.abort")
    if result is None:
        return
    row, session = result
    try:
        rt.store.abort_upload(str(file_id), row.object_key, session.storage_upload_id, session.part_count)
    except StorageError:
        log.warning("abort left parts for the purge job", extra={"event": "upload.abort_deferred",
                                                                 "file_id": str(file_id)})
    log.info("upload aborted", extra={"event": "upload.aborted", "file_id": str(file_id)})
