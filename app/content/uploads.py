# The bytes are written between transactions and recorded under the row lock (app/content/sessions.py).
"""Resumable uploads (D13): create, put a part, complete, show, abort."""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import psycopg

from app.content import quotas, sessions
from app.content.sessions import Upload, check_not_completing, check_open, require_write, visible
from app.db import files as files_sql
from app.db import sessions as sessions_sql
from app.db.conn import Conn
from app.db.events import announce_settled, write_file_updated
from app.db.files import FileRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import FilesSettled, Reach
from app.domain.objects import FileObjects
from app.domain.uploads import NATIVE, Protocol, expected_part_size, human_size, part_count
from app.domain.webhooks import FILE_FAILED
from app.errors import Conflict, Forbidden, Gone, NotFound, StorageError, TooLarge
from app.platform.jobs import enqueue_purge
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.uploads")


@dataclass(frozen=True)
class NewUpload:
    name: str
    size_bytes: int
    mime_type: str
    purpose: str = "attachment"
    sha256: str | None = None
    scope_id: uuid.UUID | None = None
    protocol: Protocol = NATIVE  # tus (app/content/tus.py) or direct (app/content/direct.py)


def create_upload(rt: Runtime, principal: Principal, new: NewUpload) -> Upload:
    """Create a file and its session; the object store's multipart upload is begun first (S3), so that the
    row never names an upload that does not exist."""
    require_write(principal)
    if not access.may_upload_purpose(principal, new.purpose):
        raise Forbidden("manage")
    if new.size_bytes > rt.limits.max_size:
        raise TooLarge(
            "file_too_large",
            f"The file is larger than this installation takes: at most "
            f"{human_size(rt.limits.max_size)} (file.max_size).",
        )
    scan_max_size = rt.limits.scan_max_size
    if scan_max_size is not None and new.size_bytes > scan_max_size:
        raise TooLarge(
            "too_large_to_scan",
            f"The file is larger than the scanner takes: at most {human_size(scan_max_size)} (scan.max_size).",
        )
    file_id = uuid.uuid4()
    object_key = FileObjects(file_id).next_original
    part_size = rt.limits.part_size
    # A direct upload's bytes reach the store as the client sent them: it is never sealed (and with
    # file.encryption on it is refused before this, app/content/direct.py).
    wrapped = rt.files.new_key(file_id) if new.protocol.through_api else None
    ref = rt.store.begin_upload(str(file_id), object_key, new.mime_type)
    now = rt.clock.now()

    def record(uow: UnitOfWork) -> Upload:
        # Both rows as the inserts answer them (a new session has no parts): no read after the writes. Inserting
        # the file reserves its size; the quota then refuses what does not fit, and nothing stays.
        row = files_sql.insert_file(
            uow.conn,
            {
                "id": file_id,
                "uploaded_by": principal.id,
                "purpose": new.purpose,
                "original_name": new.name,
                "mime_type": new.mime_type,
                "size_bytes": new.size_bytes,
                "scope_id": new.scope_id,
                "object_key": object_key,
                "created_at": now,
                "encrypted": wrapped is not None,
                "key_id": wrapped.key_id if wrapped else None,
                "wrapped_key": wrapped.wrapped if wrapped else None,
                "piece_size": part_size if wrapped else None,
                "store": rt.primary,  # every object of the file lies in the store it began in
            },
        )
        session = sessions_sql.insert_session(
            uow.conn,
            {
                "file_id": file_id,
                "part_size": part_size,
                "part_count": part_count(new.size_bytes, part_size),
                "storage_upload_id": ref.upload_id,
                "expected_sha256": new.sha256,
                "created_at": now,
                "expires_at": now + rt.limits.session_ttl,
                "protocol": new.protocol.name,
            },
        )
        quotas.reserve(uow.conn, rt.limits.quota, principal.id, new.purpose, new.size_bytes)
        return Upload(row, session)

    try:
        view = rt.db.unit_of_work(record, name="upload.create")
    except Exception:
        # No row names the upload begun above (a refused quota, a failed commit): it goes as the rule allows, at
        # once (a failure leaves it to `lethe audit`).
        try:
            rt.files.abort_uploads(sessions.clearance(rt, file_id, Reach.FILE), {file_id: [ref]})
        except (StorageError, psycopg.Error):
            log_event(
                log,
                "warning",
                "upload.begun_left",
                "an upload begun for a file never recorded is left to `lethe audit`",
                file_id=str(file_id),
            )
        raise
    metrics.UPLOADS_CREATED.labels(new.protocol.transfer).inc()
    log_event(
        log,
        "info",
        "upload.created",
        "upload created",
        file_id=str(file_id),
        part_count=view.session.part_count,
        transfer=new.protocol.transfer,
    )
    return view


def get_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> Upload:
    """The caller's upload: 404 when not visible, then 403 without `files:read` (like every other read)."""

    def read(conn: Conn) -> Upload:
        upload = visible(conn, principal, file_id)
        if not access.may_read(principal):
            raise Forbidden("files:read")
        return upload.with_parts(conn)

    return rt.db.read(read)


def put_part(
    rt: Runtime, principal: Principal, file_id: uuid.UUID, part_number: int, body: BinaryIO, content_length: int | None
) -> int:
    """Store part n of the caller's open upload. Its size must be exact: part_size, or the remainder for the
    last part.

    Returns:
        The size of the part stored.
    """
    upload = rt.db.read(lambda conn: visible(conn, principal, file_id))
    file_row, session = upload.file, upload.session
    require_write(principal)
    check_open(session, rt.clock.now())
    check_not_completing(rt, session, rt.clock.now())
    if upload.protocol.native_parts_refused:
        # A tus upload's parts are cut by its PATCH requests, with its tail: a native part would not be counted.
        # A direct upload's bytes never pass through the api; its parts go to their presigned URLs.
        raise Conflict(*upload.protocol.native_parts_refused)
    if not 1 <= part_number <= session.part_count:
        raise Conflict("part_number_out_of_range", "This upload has no such part: its parts are 1 to its part_count.")
    expected = expected_part_size(file_row.size_bytes, session.part_size, part_number)
    if content_length is not None and content_length != expected:
        raise Conflict("wrong_part_size", wrong_size(part_number, expected, session.part_count, content_length))
    try:
        part = rt.files.put_part(
            file_row,
            upload.ref,
            part_number,
            exactly(body, expected, wrong_size(part_number, expected, session.part_count)),
        )
    except (StorageError, NotFound):
        # S3 refuses a part of a multipart upload that a completion or an abort just ended: answer what the
        # row says now (409, 410), and 503 only when the upload is still open and no completion has its lease.
        sessions.raise_what_the_row_says(rt, principal, file_id)
        raise StorageError("the part could not be stored") from None

    def record(uow: UnitOfWork) -> bool:
        try:
            locked = visible(uow.conn, principal, file_id, lock=True).session
            check_open(locked, rt.clock.now())
        except (NotFound, Gone, Conflict):
            return False  # the upload ended while the part was written
        check_not_completing(rt, locked, rt.clock.now())  # a completion reads the parts: leave them be
        sessions_sql.upsert_part(uow.conn, file_id, part_number, expected, part.etag, rt.clock.now())
        return True

    if not rt.db.unit_of_work(record, name="upload.part"):
        # The session ended while the part was written (aborted, expired, deleted or completed): what it left
        # goes as the rule allows (never by dropping a live upload), then the answer is what the row says.
        sessions.remove_ended(rt, upload)
        sessions.raise_what_the_row_says(rt, principal, file_id)
        raise Conflict("upload_not_open")
    return expected


def wrong_size(part_number: int, expected: int, part_count: int, sent: int | None = None) -> str:
    """What a part of the wrong size should have been (the detail of wrong_part_size)."""
    which = "the last part" if part_number == part_count else f"part {part_number} of {part_count}"
    got = f" ({sent} were sent)" if sent is not None else ""
    return (
        f"Part {part_number} must be exactly {expected} bytes, {which}{got}: every part but the last is the "
        "upload's part_size, the last holds the rest. Send the part's raw bytes as the body "
        "(curl --data-binary @part), not a form."
    )


def exactly(body: BinaryIO, size: int, detail: str | None = None, chunk_size: int = 1024 * 1024) -> Iterator[bytes]:
    """The body's bytes in chunks as they arrive, so that a part is never held whole in memory;
    a body shorter or longer than `size` raises Conflict(wrong_part_size, detail) while the store is still
    reading it (both drivers read the chunks to their end before they keep anything), so nothing of it is kept."""
    left = size
    while left:
        chunk = body.read(min(chunk_size, left))
        if not chunk:
            raise Conflict("wrong_part_size", detail)
        left -= len(chunk)
        yield chunk
    if body.read(1):
        raise Conflict("wrong_part_size", detail)


def _empty_part_sent(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> bool:
    """An empty file's one part is empty: a client that completes it without sending that part (nothing to send)
    has it stored here, as a PUT of no bytes would. True when it was."""
    upload = rt.db.read(lambda conn: visible(conn, principal, file_id))
    if upload.file.size_bytes != 0 or upload.protocol is not NATIVE:
        return False
    put_part(rt, principal, file_id, 1, io.BytesIO(b""), 0)
    return True


def complete_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> FileRow:
    """Assemble the original, verify size and sha256, and start the scan: two transactions, the completion's
    lease and its record, the store's work between them (app/content/sessions.py).

    A completion first takes the upload's completion lease, so that no second complete, abort or part upload
    interleaves with it; completing an upload that is already complete answers the same file (a client
    retrying after a timeout succeeds). An object is removed on the way out only when no row can reference it
    any more (the upload was aborted, expired or deleted meanwhile).

    Returns:
        The files row, complete.

    Raises:
        Conflict(parts_missing | upload_not_open | upload_completing), Gone(upload_expired), NotFound,
        Conflict(size_mismatch | checksum_mismatch | content_corrupt): the file is now failed.
    """

    def begin(uow: UnitOfWork) -> tuple[Upload, sessions.Completion | None]:
        upload = visible(uow.conn, principal, file_id, lock=True)
        return upload, sessions.begin_completion(rt, uow, principal, upload)

    try:
        upload, completion = rt.db.unit_of_work(begin, name="upload.lease")
    except Conflict as exc:
        if exc.reason != "parts_missing" or not _empty_part_sent(rt, principal, file_id):
            raise
        upload, completion = rt.db.unit_of_work(begin, name="upload.lease")
    if completion is None:
        return upload.file  # completed before: the same file
    assembled = sessions.assemble(rt, principal, completion)
    finished = rt.db.unit_of_work(
        lambda uow: sessions.finish_completion(rt, uow, principal, assembled), name="upload.complete"
    )
    return sessions.after_completion(rt, principal, finished).file


def abort_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """Abort the caller's open upload: the session is aborted and the file failed (one event); its parts (and
    a tus upload's tail) are removed by the purge job committed with the change, and at once as the one rule
    allows (a legal hold keeps them until the purge after its release)."""
    require_write(principal)

    def record(uow: UnitOfWork) -> Upload | None:
        upload = visible(uow.conn, principal, file_id, lock=True)
        session = upload.session
        if session.state == "aborted":
            return None  # a second abort changes nothing
        if session.state != "open":
            raise Conflict("upload_not_open")
        now = rt.clock.now()
        check_not_completing(rt, session, now)
        sessions_sql.set_state(uow.conn, file_id, "aborted")
        sessions_sql.delete_parts(uow.conn, file_id)
        files_sql.set_failed(uow.conn, file_id, now)
        write_file_updated(uow, file_id, principal.id, now)
        announce_settled(uow, FilesSettled(FILE_FAILED, (file_id,), now, reason="aborted"))
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return upload

    ended = rt.db.unit_of_work(record, name="upload.abort")
    if ended is None:
        return
    sessions.remove_ended(rt, ended)
    log_event(log, "info", "upload.aborted", "upload aborted", file_id=str(file_id))
