# A tus PATCH writes objects before the rows that count them and never inside a transaction (D4 K1), as the
# native parts do: it takes its session's write lease in a short transaction (writing_since), writes whole parts and the
# tail to the store, and records each under the row lock after re-checking that the session is still open and
# still its own. When a record finds the session ended, what it left is removed as the one rule for bytes allows
# (the purge job of the ending names the same keys: the parts and uploads/<id>/tail); a legal hold keeps all.
"""tus 1.0 uploads (D19): creation, offset, PATCH, termination over Lethe's upload sessions.

A tus upload is an upload session of protocol `tus`: created like a native one (the same rules, quotas and
expiry), its bytes cut into the same parts (`part_size`, the last one the remainder) whatever the PATCH sizes,
the bytes past the last whole part kept in the tail object (`uploads/<id>/tail`, `tail_bytes` of them) until
a later PATCH completes a part with them. When the last part is recorded the upload completes exactly as
`POST /uploads/{id}/complete` does (app.content.uploads.complete_upload).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, BinaryIO

import psycopg

from app.content import uploads
from app.content.uploads import NewUpload, _ref, _require_write, _visible_upload
from app.db import sessions as sessions_sql
from app.db.files import FileRow
from app.db.sessions import SessionRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.objects import FileObjects
from app.domain.tus import offset_of
from app.domain.uploads import expected_part_size, lease_in_force
from app.errors import (
    BadRequest,
    ChecksumMismatch,
    Conflict,
    Forbidden,
    Gone,
    LetheError,
    NotFound,
    TooLarge,
)
from app.platform.observability.logs import log_event
from app.platform.process import process_id

if TYPE_CHECKING:
    from app.domain.access import Principal
    from app.runtime import Runtime

log = logging.getLogger("lethe.tus")
CHUNK = 1024 * 1024


@dataclass(frozen=True)
class TusUpload:
    """What HEAD answers of a tus upload: its length, the offset received for good, its expiry (None once
    complete), and its metadata (for its uploader alone: it holds the file name)."""

    file_id: uuid.UUID
    length: int
    offset: int
    expires_at: datetime | None
    metadata: dict[str, str]


Leased = tuple[FileRow, SessionRow, list[int], datetime]  # a PATCH's lease: the rows, the parts before it, when


def _view(row: FileRow, session: SessionRow, sizes: list[int]) -> TusUpload:
    completed = session.state == "completed"
    metadata = {"filename": row.original_name, "filetype": row.mime_type, "purpose": row.purpose}
    if session.expected_sha256:
        metadata["sha256"] = session.expected_sha256
    return TusUpload(
        row.id,
        row.sent_size,
        offset_of(row.sent_size, session.part_count, sizes, session.tail_bytes, completed),
        None if completed else session.expires_at,
        metadata,
    )


def _check_tus_alive(session: SessionRow, now: datetime) -> None:
    """A tus upload answers while open or complete: a terminated one is gone (410 upload_terminated), an
    expired one too (410 upload_expired, D8: at expires_at exactly); one sent natively is not tus's (404)."""
    if session.protocol != "tus":
        raise NotFound()
    if session.state == "aborted":
        raise Gone("upload_terminated")
    if session.state == "expired" or (session.state == "open" and now >= session.expires_at):
        raise Gone("upload_expired")


def create(rt: Runtime, principal: Principal, new: NewUpload) -> TusUpload:
    """Create a tus upload: a file and its session of protocol tus, under the rules of createUpload."""
    view = uploads.create_upload(rt, principal, dataclasses.replace(new, protocol="tus"))
    return _view(view.file, view.session, [])


def status(rt: Runtime, principal: Principal, file_id: uuid.UUID, reading: bool = True) -> TusUpload:
    """HEAD: the caller's own tus upload (404 for anyone else's, then 403 without files:read). With reading
    False, the offset a PATCH or creation answers, which files:write alone may ask."""

    def read(conn: psycopg.Connection) -> TusUpload:
        row, session = _visible_upload(conn, principal, file_id)
        if reading and not access.may_read(principal):
            raise Forbidden("files:read")
        _check_tus_alive(session, rt.clock.now())
        return _view(row, session, [part.size_bytes for part in sessions_sql.parts_of(conn, file_id)])

    return rt.db.read(read)


def terminate(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """DELETE: abort the unfinished upload as abortUpload does (the file failed, its purge job committed with
    the change), and remove its parts and tail at once as a best effort. A complete upload answers 409
    upload_not_open: it is a file now, deleted through deleteFile."""
    _require_write(principal)
    rt.db.read(lambda conn: _check_tus_alive(_visible_upload(conn, principal, file_id)[1], rt.clock.now()))
    uploads.abort_upload(rt, principal, file_id)  # its parts and tail go as the one rule allows


def append(
    rt: Runtime,
    principal: Principal,
    file_id: uuid.UUID,
    offset: int,
    body: BinaryIO,
    content_length: int | None,
    checksum: tuple[str, bytes] | None,
) -> TusUpload:
    """PATCH: take the body's bytes at `offset`, which must be the upload's offset (409 offset_mismatch).

    Whole parts are recorded as they fill, so that an interrupted body keeps what arrived (tus: store as
    much as possible); with an Upload-Checksum nothing of the body counts until its digest matched (460
    otherwise). The PATCH that receives the last byte completes the upload.

    Raises:
        Conflict(offset_mismatch | upload_busy | upload_completing | upload_not_open), Gone, NotFound,
        TooLarge(past_upload_length), ChecksumMismatch, BadRequest(body_incomplete), Invalid (the completion's
        size or digest check: the file is now failed), StorageError.
    """
    _require_write(principal)
    leased = _lease_waiting(rt, principal, file_id, offset, content_length)
    if isinstance(leased, TusUpload):
        return leased  # complete already: a PATCH of no byte at its length is answered as done
    row, session, sizes, leased_at = leased
    patch = _Patch(rt, principal, row, session, sizes, leased_at)
    try:
        complete = patch.run(body, content_length, checksum)
    finally:
        patch.end_lease()
    if complete:
        uploads.remove_strays(rt, file_id, [FileObjects(file_id).tail_key])  # its bytes are in the last part now
        uploads.complete_upload(rt, principal, file_id)
    return status(rt, principal, file_id, reading=False)


def _lease_waiting(
    rt: Runtime, principal: Principal, file_id: uuid.UUID, offset: int, content_length: int | None
) -> TusUpload | Leased:
    """Take the session's write lease for this PATCH. While another PATCH has it, wait up to file.write_wait for
    it to end the lease (a client that paused, or lost its connection, sends again at once while the server still
    finishes the part the old request was writing), then answer 409 upload_busy."""
    deadline = time.monotonic() + rt.cfg.file.write_wait.total_seconds()
    while True:
        try:
            return rt.db.unit_of_work(
                lambda uow: _take_lease(rt, uow, principal, file_id, offset, content_length), name="tus.lease"
            )
        except Conflict as exc:
            if exc.reason != "upload_busy" or time.monotonic() >= deadline:
                raise
        time.sleep(0.05)  # a bounded wait for a lease a request of this service has


def _take_lease(
    rt: Runtime, uow: UnitOfWork, principal: Principal, file_id: uuid.UUID, offset: int, content_length: int | None
) -> TusUpload | Leased:
    row, session = _visible_upload(uow.conn, principal, file_id, lock=True)
    now = rt.clock.now()
    _check_tus_alive(session, now)
    if session.state == "completed":
        if offset != row.sent_size:
            raise Conflict("offset_mismatch", "The upload is complete; its offset is its length.")
        if content_length:
            raise TooLarge("past_upload_length")
        return _view(row, session, [])
    uploads._check_not_completing(rt, session, now)
    if lease_in_force(session.writing_since, now, rt.cfg.file.write_timeout):
        raise Conflict("upload_busy", "Another PATCH is writing this upload; ask its offset with HEAD and retry.")
    sizes = [part.size_bytes for part in sessions_sql.parts_of(uow.conn, file_id)]
    if offset != offset_of(row.size_bytes, session.part_count, sizes, session.tail_bytes, False):
        raise Conflict("offset_mismatch", "Upload-Offset is not the upload's offset; ask it with HEAD.")
    if content_length is not None and offset + content_length > row.size_bytes:
        raise TooLarge("past_upload_length")
    sessions_sql.take_write_lease(uow.conn, file_id, now, process_id())
    return row, session, sizes[: session.part_count - 1] if len(sizes) >= session.part_count else sizes, now


class _Patch:
    """One PATCH's writing: the tail and the body, cut into whole parts, under its write lease of the session."""

    def __init__(
        self,
        rt: Runtime,
        principal: Principal,
        row: FileRow,
        session: SessionRow,
        sizes: list[int],
        leased_at: datetime,
    ):
        self.rt, self.principal, self.file_id = rt, principal, row.id
        self.row, self.session = row, session
        self.ref = _ref(row, session)
        self.length, self.part_size, self.count = row.size_bytes, session.part_size, session.part_count
        self.next = len(sizes) + 1
        self.tail_bytes = session.tail_bytes
        self.leased_at = leased_at
        self.offset = sum(sizes) + self.tail_bytes
        self.written: list[int] = []  # part numbers this PATCH wrote (removed again if the session ended)
        self.beat_every = rt.cfg.file.write_timeout.total_seconds() / 4
        self.last_beat = time.monotonic()

    def run(self, body: BinaryIO, content_length: int | None, checksum: tuple[str, bytes] | None) -> bool:
        """Write the body; True when every part is recorded (the caller completes the upload)."""
        buffer = bytearray(self._tail())
        hasher = hashlib.new(checksum[0]) if checksum else None
        allowed = self.length - self.offset
        limit = content_length if content_length is not None else allowed + 1
        pending: list[tuple[int, int, str]] = []
        received = 0
        flushed = False
        interrupted = False
        while received < limit:
            chunk = _read(body, min(CHUNK, limit - received))
            if chunk is None:
                interrupted = True
                break
            if not chunk:
                break
            received += len(chunk)
            if received > allowed:
                raise TooLarge("past_upload_length")
            if hasher is not None:
                hasher.update(chunk)
            buffer += chunk
            flushed = self._cut_parts(buffer, hasher is None, pending) or flushed
            self._beat_if_due()
        if self.length == 0:
            flushed = self._cut_parts(buffer, hasher is None, pending) or flushed  # an empty file: one empty part
        if interrupted or (content_length is not None and received < content_length):
            # The client went away: whole parts stay recorded; without a checksum the rest is kept as the
            # tail (tus: keep as much as possible), with one nothing of an unverified body counts.
            if hasher is None and buffer and self.next <= self.count:
                self._keep_tail(bytes(buffer))
            raise BadRequest("body_incomplete")
        if hasher is not None and checksum is not None and hasher.digest() != checksum[1]:
            self._drop_unrecorded([number for number, _, _ in pending])
            raise ChecksumMismatch("checksum_mismatch")
        if pending:
            self._record(pending, 0)
        if self.next > self.count:
            return True
        if buffer and (received or flushed):
            self._keep_tail(bytes(buffer))
        return False

    def _cut_parts(self, buffer: bytearray, record: bool, pending: list[tuple[int, int, str]]) -> bool:
        """Write every whole part the buffer holds (recording each at once, or keeping it pending until the
        body's checksum matched); True when it wrote any."""
        wrote = False
        while self.next <= self.count and len(buffer) >= self._expected(self.next):
            size = self._expected(self.next)
            part = self.rt.files.put_part(self.row, self.ref, self.next, bytes(buffer[:size]))
            self.written.append(self.next)
            del buffer[:size]
            if record:
                self._record([(self.next, size, part.etag)], 0)
            else:
                pending.append((self.next, size, part.etag))
            wrote = True
            self.next += 1
        return wrote

    def _expected(self, number: int) -> int:
        return expected_part_size(self.length, self.part_size, number)

    def _tail(self) -> bytes:
        """The tail's counted bytes. A tail shorter than its row says (lost with its store) sets the upload
        back to its last whole part: the client asks the offset again (409) and sends from there."""
        if not self.tail_bytes:
            return b""
        data = self.rt.files.read_tail(self.row, self.next)  # b"": missing, or sealed bytes that do not open
        if len(data) < self.tail_bytes:
            log_event(
                log,
                "warning",
                "tus.tail_lost",
                "the tail of an upload was shorter than recorded; the upload resumes from its last whole part",
                file_id=str(self.file_id),
            )
            self._record([], 0)
            raise Conflict("offset_mismatch", "The upload's offset moved back; ask it with HEAD.")
        return data[: self.tail_bytes]

    def _keep_tail(self, data: bytes) -> None:
        # Written before it is counted: a tail longer than tail_bytes is read only as far as counted, and when
        # the row counts none (a part was cut) any earlier tail is stale, so overwriting it is safe.
        self.rt.files.write_tail(self.row, self.next, data)
        self._record([], len(data))

    def _record(self, parts: list[tuple[int, int, str]], tail_bytes: int) -> None:
        now = self.rt.clock.now()

        def record(uow: UnitOfWork) -> bool:
            try:
                _, locked = _visible_upload(uow.conn, self.principal, self.file_id, lock=True)
            except NotFound:
                return False
            if locked.state != "open" or now >= locked.expires_at or locked.writing_since != self.leased_at:
                return False
            for number, size, etag in parts:
                sessions_sql.upsert_part(uow.conn, self.file_id, number, size, etag, now)
            sessions_sql.set_tail(uow.conn, self.file_id, tail_bytes)
            sessions_sql.renew_write_lease(uow.conn, self.file_id, self.leased_at, now)
            return True

        if not self.rt.db.unit_of_work(record, name="tus.record"):
            self._ended()
        self.leased_at, self.last_beat = now, time.monotonic()

    def _beat_if_due(self) -> None:
        if time.monotonic() - self.last_beat < self.beat_every:
            return
        now = self.rt.clock.now()
        if not self.rt.db.unit_of_work(
            lambda uow: sessions_sql.renew_write_lease(uow.conn, self.file_id, self.leased_at, now), name="tus.beat"
        ):
            self._ended()
        self.leased_at, self.last_beat = now, time.monotonic()

    def _drop_unrecorded(self, numbers: list[int]) -> None:
        """Parts written from a body that failed its checksum: on fs their objects go now (as strays: a legal
        hold keeps them for the purge); on S3 a part cannot be removed alone, and it stays inside the multipart
        upload (no object, nothing readable) until the next PATCH overwrites it or the session ends."""
        keys_of_parts = self.rt.store.part_keys(str(self.file_id), max(numbers, default=0))
        uploads.remove_strays(
            self.rt, self.file_id, [keys_of_parts[number - 1] for number in numbers if number <= len(keys_of_parts)]
        )

    def _ended(self) -> None:
        """The session ended (terminated, expired, deleted, completed) or another PATCH took it over while this
        one wrote: unless it is another PATCH's now, what the session left goes as the one rule allows (a
        legal hold keeps every part and the tail; a session that completed keeps its file); then answer what
        the row says."""
        taken_over = self.rt.db.read(lambda conn: _taken_over(conn, self.file_id, self.leased_at))
        if not taken_over:
            uploads.remove_ended(self.rt, self.row, self.session)
        self.written = []
        self.rt.db.read(
            lambda conn: _check_tus_alive(_visible_upload(conn, self.principal, self.file_id)[1], self.rt.clock.now())
        )
        raise Conflict("upload_busy" if taken_over else "upload_not_open")

    def end_lease(self) -> None:
        """End the write lease (a PATCH that failed leaves the session to the next one at once)."""
        try:
            self.rt.db.unit_of_work(
                lambda uow: sessions_sql.end_write_lease(uow.conn, self.file_id, self.leased_at), name="tus.end_lease"
            )
        except (psycopg.Error, LetheError):
            pass  # the lease lapses after file.write_timeout


def _read(body: BinaryIO, size: int) -> bytes | None:
    """The next bytes of a body, b"" at its end, None when the client went away in the middle of it (the WSGI
    server or werkzeug raise then; which exception depends on the server)."""
    try:
        return body.read(size)
    except Exception:
        return None


def _taken_over(conn: psycopg.Connection, file_id: uuid.UUID, leased_at: datetime) -> bool:
    session = sessions_sql.session_of(conn, file_id)
    return (
        session is not None
        and session.state == "open"
        and session.writing_since is not None
        and session.writing_since != leased_at
    )
