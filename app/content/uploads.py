# Uploads write objects before the rows that reference them and never inside a transaction (D4 K1): each
# store call runs between units of work, and a unit of work re-checks under the file's row lock what the
# earlier read saw. What an ended session leaves is removed only as the one rule for bytes allows (a legal
# hold keeps it whole, for the purge after the release); a stray part is never dropped by ending a whole
# multipart upload that still counts other parts.
"""Resumable uploads (D13): create, put a part, complete, show, abort."""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO

import psycopg

from app.content.detect import detect_stored
from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import sessions as sessions_sql
from app.db.conn import Conn
from app.db.events import write_file_updated
from app.db.files import FileRow
from app.db.sessions import PartRow, SessionRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import Clearance, Scope
from app.domain.objects import FileObjects
from app.domain.uploads import expected_part_size, human_size, lease_in_force, listed_parts_problem, part_count
from app.errors import (
    Conflict,
    ContentCorrupt,
    Forbidden,
    Gone,
    KeyUnavailable,
    NotFound,
    StorageError,
    TooLarge,
)
from app.platform.jobs import enqueue_purge, enqueue_scan
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.platform.process import process_id
from app.storage.base import MultipartRef, UploadedPart

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.uploads")
# How a session's bytes travel, as the API and the metrics name it: through the api, straight to the store, or tus.
TRANSFERS = {"native": "api", "direct": "direct", "tus": "tus"}


@dataclass(frozen=True)
class NewUpload:
    name: str
    size_bytes: int
    mime_type: str
    purpose: str = "attachment"
    sha256: str | None = None
    scope_id: uuid.UUID | None = None
    protocol: str = "native"  # tus (app/content/tus.py) or direct (app/content/direct.py)


@dataclass(frozen=True)
class UploadView:
    """An upload as its uploader sees it: the file, its session and the parts received."""

    file: FileRow
    session: SessionRow
    parts: list[PartRow]


def _visible_upload(
    conn: Conn, principal: Principal, file_id: uuid.UUID, lock: bool = False
) -> tuple[FileRow, SessionRow]:
    """The file and session of the caller's own live upload, else NotFound (someone else's, unknown or
    deleted are the same 404)."""
    row = (files_sql.lock_file if lock else files_sql.file_by_id)(conn, file_id)
    if row is None or row.deleted_at is not None or not access.drives_upload(principal, row.uploaded_by):
        raise NotFound()
    session = (sessions_sql.lock_session if lock else sessions_sql.session_of)(conn, file_id)
    if session is None:
        raise NotFound()
    return row, session


def _ref(file_row: FileRow, session: SessionRow) -> MultipartRef:
    """The store's reference to the upload of a file, rebuilt from its rows."""
    return MultipartRef(file_id=str(file_row.id), key=file_row.object_key or "", upload_id=session.storage_upload_id)


def objects_of(file_row: FileRow, session: SessionRow) -> FileObjects:
    """What an upload's file owns in the store, from its rows: everything an ended session may have left."""
    return FileObjects(
        file_row.id,
        file_row.object_key,
        upload_id=session.storage_upload_id,
        part_count=session.part_count,
        parts_open=session.state != "completed",
        tail=session.protocol == "tus",
        sealed=file_row.encrypted,
    )


def clearance(rt: Runtime, file_id: uuid.UUID, scope: Scope) -> Clearance:
    """The one rule's answer for this file's bytes, right before a removal (its own short transaction)."""
    return rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, [file_id], scope, rt.clock.now()), name="upload.clear"
    )


def remove_ended(rt: Runtime, file_row: FileRow, session: SessionRow) -> bool:
    """Remove what an ended session (aborted, expired, deleted) left in the store, as the one rule allows: its
    parts or multipart upload, its tail, an original assembled too late. The purge job committed with the
    ending names the same objects, so a failure here leaves them to it.

    Returns:
        Whether the rule keeps them (a legal hold: the purge after its release removes them).
    """
    try:
        cleared = clearance(rt, file_row.id, Scope.FILE)
        if file_row.id not in cleared:
            return True
        refused = rt.files.remove(cleared, [objects_of(file_row, session)]).refused
    except (StorageError, psycopg.Error):
        refused = {file_row.id: "unavailable"}
    if refused:
        log_event(
            log,
            "warning",
            "upload.removal_deferred",
            "what an ended upload left is left to its purge job",
            file_id=str(file_row.id),
        )
    return False


def remove_strays(rt: Runtime, file_id: uuid.UUID, keys_of_file: list[str]) -> None:
    """Remove copies no row counts of a file that lives on (parts written after its completion, a tail whose
    bytes went into the last part, parts of a body that failed its checksum), unless a legal hold keeps them:
    they then go with the file's purge. A failure leaves them to the purge or to `lethe audit`."""
    if not keys_of_file:
        return
    try:
        rt.files.remove_keys(clearance(rt, file_id, Scope.STRAY), {file_id: keys_of_file})
    except (StorageError, psycopg.Error):
        log_event(
            log,
            "warning",
            "upload.strays_left",
            "copies of an upload's bytes could not be removed; they go with the file",
            file_id=str(file_id),
        )


def _require_write(principal: Principal) -> None:
    if not access.may_write(principal):
        raise Forbidden("files:write")


def create_upload(rt: Runtime, principal: Principal, new: NewUpload) -> UploadView:
    """Create a file and its session; the object store's multipart upload is begun first (S3), so that the
    row never names an upload that does not exist."""
    _require_write(principal)
    if not access.may_upload_purpose(principal, new.purpose):
        raise Forbidden("manage")
    if new.size_bytes > rt.limits.max_size:
        raise TooLarge(
            "file_too_large",
            f"The file is larger than this installation takes: at most "
            f"{human_size(rt.limits.max_size)} (file.max_size).",
        )
    if rt.cfg.scan.clamd_address and new.size_bytes > rt.cfg.scan.max_size:
        raise TooLarge(
            "too_large_to_scan",
            f"The file is larger than the scanner takes: at most {human_size(rt.cfg.scan.max_size)} (scan.max_size).",
        )
    file_id = uuid.uuid4()
    object_key = FileObjects(file_id).next_original
    part_size = rt.limits.part_size
    # A direct upload's bytes reach the store as the client sent them: it is never sealed (and with
    # file.encryption on it is refused before this, app/content/direct.py).
    wrapped = rt.files.new_key(file_id) if new.protocol != "direct" else None
    ref = rt.store.begin_upload(str(file_id), object_key, new.mime_type)
    now = rt.clock.now()

    def record(uow: UnitOfWork) -> UploadView:
        files_sql.insert_file(
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
            },
        )
        sessions_sql.insert_session(
            uow.conn,
            {
                "file_id": file_id,
                "part_size": part_size,
                "part_count": part_count(new.size_bytes, part_size),
                "storage_upload_id": ref.upload_id,
                "expected_sha256": new.sha256,
                "created_at": now,
                "expires_at": now + rt.limits.session_ttl,
                "protocol": new.protocol,
            },
        )
        return _view(uow.conn, file_id)

    try:
        view = rt.db.unit_of_work(record, name="upload.create")
    except Exception:
        # No row names the upload begun above: it goes as the rule allows (a failure leaves it to `lethe audit`).
        try:
            rt.files.abort_uploads(clearance(rt, file_id, Scope.FILE), {file_id: [ref]})
        except (StorageError, psycopg.Error):
            log_event(
                log,
                "warning",
                "upload.begun_left",
                "an upload begun for a file never recorded is left to `lethe audit`",
                file_id=str(file_id),
            )
        raise
    metrics.UPLOADS_CREATED.labels(TRANSFERS[new.protocol]).inc()
    log_event(
        log,
        "info",
        "upload.created",
        "upload created",
        file_id=str(file_id),
        part_count=view.session.part_count,
        transfer=TRANSFERS[new.protocol],
    )
    return view


def _view(conn: Conn, file_id: uuid.UUID) -> UploadView:
    row, session = files_sql.file_by_id(conn, file_id), sessions_sql.session_of(conn, file_id)
    if row is None or session is None:
        raise NotFound()
    return UploadView(row, session, sessions_sql.parts_of(conn, file_id))


def get_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> UploadView:
    """The caller's upload: 404 when not visible, then 403 without `files:read` (like every other read)."""

    def read(conn: Conn) -> UploadView:
        _visible_upload(conn, principal, file_id)
        if not access.may_read(principal):
            raise Forbidden("files:read")
        return _view(conn, file_id)

    return rt.db.read(read)


def _check_open(session: SessionRow, now: datetime) -> None:
    """An upload takes parts and completion only while open and before expires_at (D8: expired at
    expires_at exactly)."""
    if session.state == "expired" or (session.state == "open" and now >= session.expires_at):
        raise Gone("upload_expired")
    if session.state != "open":
        raise Conflict("upload_not_open")


def _raise_what_the_row_says(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """After a store call or a record failed: raise what the upload's row says now (404, 410, 409 not open
    or completing); return when it is still open and no completion has its lease."""

    def check(conn: Conn) -> None:
        session = _visible_upload(conn, principal, file_id)[1]
        _check_open(session, rt.clock.now())
        _check_not_completing(rt, session, rt.clock.now())

    rt.db.read(check)


def _check_not_completing(rt: Runtime, session: SessionRow, now: datetime) -> None:
    """A completion has the upload's lease: no part, abort or second complete interleaves with it (409)."""
    if lease_in_force(session.completing_since, now, rt.limits.complete_timeout):
        raise Conflict("upload_completing", "A completion of this upload is in progress; retry shortly.")


def put_part(
    rt: Runtime, principal: Principal, file_id: uuid.UUID, part_number: int, body: BinaryIO, content_length: int | None
) -> int:
    """Store part n of the caller's open upload. Its size must be exact: part_size, or the remainder for the
    last part.

    Returns:
        The size of the part stored.
    """
    file_row, session = rt.db.read(lambda conn: _visible_upload(conn, principal, file_id))
    _require_write(principal)
    _check_open(session, rt.clock.now())
    _check_not_completing(rt, session, rt.clock.now())
    if session.protocol == "tus":
        # A tus upload's parts are cut by its PATCH requests, with its tail: a native part would not be counted.
        raise Conflict("tus_upload", "This upload is sent through tus (PATCH /api/v1/tus/{id}).")
    if session.protocol == "direct":
        # A direct upload's bytes never pass through the api; its parts go to their presigned URLs.
        raise Conflict(
            "direct_upload",
            "This upload's parts go to their presigned URLs (POST .../parts/{n}/url gives a fresh one).",
        )
    if not 1 <= part_number <= session.part_count:
        raise Conflict("part_number_out_of_range", "This upload has no such part: its parts are 1 to its part_count.")
    expected = expected_part_size(file_row.size_bytes, session.part_size, part_number)
    if content_length is not None and content_length != expected:
        raise Conflict("wrong_part_size", wrong_size(part_number, expected, session.part_count, content_length))
    try:
        part = rt.files.put_part(
            file_row,
            _ref(file_row, session),
            part_number,
            exactly(body, expected, wrong_size(part_number, expected, session.part_count)),
        )
    except (StorageError, NotFound):
        # S3 refuses a part of a multipart upload that a completion or an abort just ended: answer what the
        # row says now (409, 410), and 503 only when the upload is still open and no completion has its lease.
        _raise_what_the_row_says(rt, principal, file_id)
        raise StorageError("the part could not be stored") from None

    def record(uow: UnitOfWork) -> bool:
        try:
            _, locked = _visible_upload(uow.conn, principal, file_id, lock=True)
            _check_open(locked, rt.clock.now())
        except (NotFound, Gone, Conflict):
            return False  # the upload ended while the part was written
        _check_not_completing(rt, locked, rt.clock.now())  # a completion reads the parts: leave them be
        sessions_sql.upsert_part(uow.conn, file_id, part_number, expected, part.etag, rt.clock.now())
        return True

    if not rt.db.unit_of_work(record, name="upload.part"):
        # The session ended while the part was written (aborted, expired, deleted or completed): what it left
        # goes as the rule allows (never by dropping a live upload), then the answer is what the row says.
        remove_ended(rt, file_row, session)
        _raise_what_the_row_says(rt, principal, file_id)
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
    row, session = rt.db.read(lambda conn: _visible_upload(conn, principal, file_id))
    if row.size_bytes != 0 or session.protocol != "native":
        return False
    put_part(rt, principal, file_id, 1, io.BytesIO(b""), 0)
    return True


def parts_missing(missing: list[int]) -> str:
    """Which parts a completion still waits for (the detail of parts_missing)."""
    shown = ", ".join(str(number) for number in missing[:20]) + (
        f" and {len(missing) - 20} more" if len(missing) > 20 else ""
    )
    return f"Part(s) {shown} have not arrived: send them (PUT .../parts/{{n}}), then complete again."


def complete_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> object:
    """Assemble the original, verify size and sha256, and start the scan.

    A completion first takes the upload's completion lease in a short transaction, so that no second complete, abort or
    part upload interleaves with it; completing an upload that is already complete answers the same file
    (a client retrying after a timeout succeeds). An object is removed on the way out only when no row can
    reference it any more (the upload was aborted, expired or deleted meanwhile).

    Returns:
        The files row, complete.

    Raises:
        Conflict(parts_missing | upload_not_open | upload_completing), Gone(upload_expired), NotFound,
        Conflict(size_mismatch | checksum_mismatch | content_corrupt): the file is now failed.
    """

    def lease(uow: UnitOfWork) -> tuple[FileRow, SessionRow | None, list[PartRow], datetime | None]:
        row, session = _visible_upload(uow.conn, principal, file_id, lock=True)
        _require_write(principal)
        if session.state == "completed":
            return row, None, [], None  # completed before: the same file
        now = rt.clock.now()
        _check_open(session, now)
        _check_not_completing(rt, session, now)
        parts = sessions_sql.parts_of(uow.conn, file_id)
        # A direct upload's parts are in the store alone: the store lists them once the completion has the lease.
        missing = sorted(set(range(1, session.part_count + 1)) - {part.part_number for part in parts})
        if session.protocol != "direct" and missing:
            raise Conflict("parts_missing", parts_missing(missing))
        sessions_sql.take_completion_lease(uow.conn, file_id, now, process_id())
        return row, session, parts, now

    try:
        file_row, session, parts, leased = rt.db.unit_of_work(lease, name="upload.lease")
    except Conflict as exc:
        if exc.reason != "parts_missing" or not _empty_part_sent(rt, principal, file_id):
            raise
        file_row, session, parts, leased = rt.db.unit_of_work(lease, name="upload.lease")
    if session is None or leased is None:
        return file_row
    leased_at = leased
    reason = None  # a reason the file fails: the store's parts broke the plan (direct), or a check below
    size, digest, detected = 0, None, None
    try:
        uploaded = [UploadedPart(part.part_number, part.etag) for part in parts]
        if session.protocol == "direct":
            uploaded, reason = _listed_parts(rt, file_row, session, leased_at)
        if reason is None:
            # A driver that hashed the bytes while assembling them gives the digest, and a sealed original is
            # measured by opening it: either way the digest is of the plaintext. A direct upload that a scanner
            # will read has its digest checked in that read (the bytes are read once); it is not deliverable
            # before.
            size, digest = rt.files.complete(file_row, _ref(file_row, session), uploaded)
            if digest is None and not (session.protocol == "direct" and scan_reads(rt, file_row.size_bytes)):
                size, digest = rt.files.measure(file_row)
    except ContentCorrupt:
        reason = "content_corrupt"  # the assembled parts do not open as what was sealed: the file fails
    except KeyUnavailable:
        # The keyring cannot open the file's key (checked before the parts are assembled): the configuration's
        # trouble, not the upload's. It stays open for a completion once the keyring is right (503 meanwhile).
        rt.db.unit_of_work(
            lambda uow: sessions_sql.end_completion_lease(uow.conn, file_id, leased_at), name="upload.release"
        )
        raise
    except (StorageError, NotFound):
        rt.db.unit_of_work(
            lambda uow: sessions_sql.end_completion_lease(uow.conn, file_id, leased_at), name="upload.release"
        )
        # The upload may have been aborted or deleted meanwhile: answer what the row says, else 503.
        _raise_what_the_row_says(rt, principal, file_id)
        raise StorageError("the upload could not be assembled") from None
    if reason is None and size == file_row.size_bytes:
        detected = detect_stored(rt.files, file_row)  # inline display trusts this alone
    if reason is None and size != file_row.size_bytes:
        reason = "size_mismatch"
    elif reason is None and session.expected_sha256 and digest is not None and digest != session.expected_sha256:
        reason = "checksum_mismatch"  # (no digest yet: the scan checks it before the file is deliverable)

    def record(uow: UnitOfWork) -> tuple[str, FileRow | None]:
        try:
            row, locked = _visible_upload(uow.conn, principal, file_id, lock=True)
        except NotFound:
            return "orphan", None  # deleted meanwhile: its purge may already have run
        if locked.state == "completed":
            return "done", row  # another completion (after our lease lapsed) finished the same key
        if locked.state != "open":
            return "orphan", None  # aborted or expired meanwhile: the row is failed, the object unreferenced
        if locked.completing_since != leased_at:
            raise Conflict("upload_completing")  # taken over: the other completion owns the key now
        now = rt.clock.now()
        sessions_sql.delete_parts(uow.conn, file_id)
        if reason is None:
            files_sql.set_complete(uow.conn, file_id, digest, detected, now)  # no digest yet: the scan checks it
            sessions_sql.set_completed(uow.conn, file_id, now)
            write_file_updated(uow, file_id, principal.id, now)
            enqueue_scan(uow, file_id)
        else:
            files_sql.set_failed(uow.conn, file_id, now)
            sessions_sql.set_state(uow.conn, file_id, "aborted")
            write_file_updated(uow, file_id, principal.id, now)
            enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return "recorded", files_sql.file_by_id(uow.conn, file_id)

    outcome, row = rt.db.unit_of_work(record, name="upload.complete")
    if outcome == "orphan":
        # The upload ended while it was assembled (deleted, aborted, expired): the parts are in the object now,
        # which goes as the rule allows (a legal hold keeps it for the purge after the release).
        remove_ended(rt, file_row, session)
        _raise_what_the_row_says(rt, principal, file_id)
        raise Conflict("upload_not_open")
    # A part PUT that passed its check before our lease may have landed after the assembly dropped the parts;
    # its own record saw the lease and answered 409 without removing it (D19): drop the parts once more.
    remove_strays(rt, file_id, rt.store.part_keys(str(file_id), session.part_count))
    if outcome == "done":
        return row
    if reason is not None:
        log_event(log, "info", "upload.failed", "upload failed verification", file_id=str(file_id), reason=reason)
        raise Conflict(reason)
    log_event(log, "info", "upload.completed", "upload completed", file_id=str(file_id))
    return row


def scan_reads(rt: Runtime, size_bytes: int) -> bool:
    """Whether the scan will stream every byte of a file of this size to clamd (a scanner is configured and
    takes it)."""
    return bool(rt.cfg.scan.clamd_address) and size_bytes <= rt.cfg.scan.max_size


def _listed_parts(
    rt: Runtime, file_row: FileRow, session: SessionRow, leased_at: datetime
) -> tuple[list[UploadedPart], str | None]:
    """A direct upload's parts as the store lists them (ListParts), checked against the plan: the ETags and
    sizes come from the store, never from the client. Parts still missing end the lease and
    answer 409 parts_missing (the client may still send them); a wrong size or a part past the plan is final
    (size_mismatch: the file fails and its purge aborts the upload)."""
    listed = rt.store.list_parts(_ref(file_row, session))
    problem = listed_parts_problem(
        [(part.part_number, part.size_bytes) for part in listed], file_row.size_bytes, session.part_size
    )
    if problem == "parts_missing":
        rt.db.unit_of_work(
            lambda uow: sessions_sql.end_completion_lease(uow.conn, file_row.id, leased_at), name="upload.release"
        )
        raise Conflict("parts_missing")
    return [UploadedPart(part.part_number, part.etag) for part in listed], problem


def abort_upload(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """Abort the caller's open upload: the session is aborted and the file failed (one event); its parts (and
    a tus upload's tail) are removed by the purge job committed with the change, and at once as the one rule
    allows (a legal hold keeps them until the purge after its release)."""
    _require_write(principal)

    def record(uow: UnitOfWork) -> tuple[FileRow, SessionRow] | None:
        row, session = _visible_upload(uow.conn, principal, file_id, lock=True)
        if session.state == "aborted":
            return None  # a second abort changes nothing
        if session.state != "open":
            raise Conflict("upload_not_open")
        now = rt.clock.now()
        _check_not_completing(rt, session, now)
        sessions_sql.set_state(uow.conn, file_id, "aborted")
        sessions_sql.delete_parts(uow.conn, file_id)
        files_sql.set_failed(uow.conn, file_id, now)
        write_file_updated(uow, file_id, principal.id, now)
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
        return row, session

    result = rt.db.unit_of_work(record, name="upload.abort")
    if result is None:
        return
    remove_ended(rt, *result)
    log_event(log, "info", "upload.aborted", "upload aborted", file_id=str(file_id))
