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

from app.content import sessions, uploads
from app.content.sessions import Completion, Upload, require_write, visible
from app.content.uploads import NewUpload
from app.db import sessions as sessions_sql
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.objects import FileObjects
from app.domain.tus import offset_of
from app.domain.uploads import TUS, expected_part_size, lease_in_force
from app.errors import (
    BadRequest,
    ChecksumMismatch,
    Conflict,
    Forbidden,
    Gone,
    LetheError,
    NotFound,
    StorageError,
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


@dataclass(frozen=True)
class _Lease:
    """A PATCH's write lease: the upload it was taken on (with the parts a PATCH builds on), and when."""

    upload: Upload
    leased_at: datetime


def _view(upload: Upload) -> TusUpload:
    row, session = upload.file, upload.session
    completed = session.state == "completed"
    metadata = {"filename": row.original_name, "filetype": row.mime_type, "purpose": row.purpose}
    if session.expected_sha256:
        metadata["sha256"] = session.expected_sha256
    sizes = [part.size_bytes for part in upload.parts]
    return TusUpload(
        row.id,
        row.sent_size,
        offset_of(row.sent_size, session.part_count, sizes, session.tail_bytes, completed),
        None if completed else session.expires_at,
        metadata,
    )


def _check_tus_alive(upload: Upload, now: datetime) -> None:
    """A tus upload answers while open or complete: a terminated one is gone (410 upload_terminated), an
    expired one too (410 upload_expired, D8: at expires_at exactly); one sent natively is not tus's (404)."""
    session = upload.session
    if upload.protocol is not TUS:
        raise NotFound()
    if session.state == "aborted":
        raise Gone("upload_terminated")
    if session.state == "expired" or (session.state == "open" and now >= session.expires_at):
        raise Gone("upload_expired")


def create(rt: Runtime, principal: Principal, new: NewUpload) -> TusUpload:
    """Create a tus upload: a file and its session of protocol tus, under the rules of createUpload."""
    upload = uploads.create_upload(rt, principal, dataclasses.replace(new, protocol=TUS))
    return _view(dataclasses.replace(upload, parts=()))


def status(rt: Runtime, principal: Principal, file_id: uuid.UUID, reading: bool = True) -> TusUpload:
    """HEAD: the caller's own tus upload (404 for anyone else's, then 403 without files:read). With reading
    False, the offset a PATCH or creation answers, which files:write alone may ask."""

    def read(conn: psycopg.Connection) -> TusUpload:
        upload = visible(conn, principal, file_id)
        if reading and not access.may_read(principal):
            raise Forbidden("files:read")
        _check_tus_alive(upload, rt.clock.now())
        return _view(upload.with_parts(conn))

    return rt.db.read(read)


def terminate(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """DELETE: abort the unfinished upload as abortUpload does (the file failed, its purge job committed with
    the change), and remove its parts and tail at once as a best effort. A complete upload answers 409
    upload_not_open: it is a file now, deleted through deleteFile."""
    require_write(principal)
    rt.db.read(lambda conn: _check_tus_alive(visible(conn, principal, file_id), rt.clock.now()))
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

    Whole parts are recorded with the write lease's renewals and at the body's end, so that an interrupted
    body keeps what arrived (tus: store as much as possible); with an Upload-Checksum nothing of the body
    counts until its digest matched (460 otherwise). The PATCH that receives the last byte completes the
    upload: its last parts are recorded in the transaction that begins the completion, and one more records
    the end (three transactions in all, app/content/sessions.py).

    Raises:
        Conflict(offset_mismatch | upload_busy | upload_completing | upload_not_open), Gone, NotFound,
        TooLarge(past_upload_length), ChecksumMismatch, BadRequest(body_incomplete), Invalid (the completion's
        size or digest check: the file is now failed), StorageError.
    """
    require_write(principal)
    leased = _lease_waiting(rt, principal, file_id, offset, content_length)
    if isinstance(leased, TusUpload):
        return leased  # complete already: a PATCH of no byte at its length is answered as done
    patch = _Patch(rt, principal, leased)
    try:
        written = patch.run(body, content_length, checksum)
    finally:
        patch.end_lease()
    if isinstance(written, TusUpload):
        return written
    assembled = sessions.assemble(rt, principal, written)
    finished = rt.db.unit_of_work(
        lambda uow: sessions.finish_completion(rt, uow, principal, assembled), name="upload.complete"
    )
    # The tail's bytes are in the last part now: it goes with the parts the completion left.
    return _view(sessions.after_completion(rt, principal, finished, strays=[FileObjects(file_id).tail_key]))


def _lease_waiting(
    rt: Runtime, principal: Principal, file_id: uuid.UUID, offset: int, content_length: int | None
) -> TusUpload | _Lease:
    """Take the session's write lease for this PATCH. While another PATCH has it, wait up to file.write_wait for
    it to end the lease (a client that paused, or lost its connection, sends again at once while the server still
    finishes the part the old request was writing), then answer 409 upload_busy."""
    deadline = time.monotonic() + rt.limits.write_wait.total_seconds()
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
) -> TusUpload | _Lease:
    upload = visible(uow.conn, principal, file_id, lock=True)
    row, session = upload.file, upload.session
    now = rt.clock.now()
    _check_tus_alive(upload, now)
    if session.state == "completed":
        if offset != row.sent_size:
            raise Conflict("offset_mismatch", "The upload is complete; its offset is its length.")
        if content_length:
            raise TooLarge("past_upload_length")
        return _view(upload)
    sessions.check_not_completing(rt, session, now)
    if lease_in_force(session.writing_since, now, rt.limits.write_timeout):
        raise Conflict("upload_busy", "Another PATCH is writing this upload; ask its offset with HEAD and retry.")
    upload = upload.with_parts(uow.conn)
    sizes = [part.size_bytes for part in upload.parts]
    if offset != offset_of(row.size_bytes, session.part_count, sizes, session.tail_bytes, False):
        raise Conflict("offset_mismatch", "Upload-Offset is not the upload's offset; ask it with HEAD.")
    if content_length is not None and offset + content_length > row.size_bytes:
        raise TooLarge("past_upload_length")
    sessions_sql.take_write_lease(uow.conn, file_id, now, process_id())
    # With every part recorded but the upload not complete (a completion that failed), the PATCH sends the
    # last part again: it completes the upload.
    if len(upload.parts) >= session.part_count:
        upload = dataclasses.replace(upload, parts=upload.parts[: session.part_count - 1])
    return _Lease(upload, now)


class _Patch:
    """One PATCH's writing: the tail and the body, cut into whole parts, under its write lease of the session.
    The parts it writes are recorded with the lease's renewals and when the body ends (pending meanwhile)."""

    def __init__(self, rt: Runtime, principal: Principal, lease: _Lease):
        upload = lease.upload
        self.rt, self.principal, self.file_id = rt, principal, upload.id
        self.upload = upload
        self.length, self.part_size, self.count = (
            upload.file.size_bytes,
            upload.session.part_size,
            upload.session.part_count,
        )
        self.next = len(upload.parts) + 1
        self.counted_tail = upload.session.tail_bytes  # the tail bytes the row counts
        self.leased_at = lease.leased_at
        self.offset = sum(part.size_bytes for part in upload.parts) + self.counted_tail
        self.pending: list[tuple[int, int, str]] = []  # parts written, not yet recorded
        self.cut = False  # a part was cut: it took the counted tail's bytes
        self.lease_ended = False
        self.beat_every = rt.limits.write_timeout.total_seconds() / 4
        self.last_beat = time.monotonic()

    def run(
        self, body: BinaryIO, content_length: int | None, checksum: tuple[str, bytes] | None
    ) -> TusUpload | Completion:
        """Write the body. Returns the upload as the PATCH left it (its lease ended), or, when every part is
        recorded, the completion begun in the same transaction (the caller completes the upload)."""
        buffer = bytearray(self._tail())
        hasher = hashlib.new(checksum[0]) if checksum else None
        allowed = self.length - self.offset
        limit = content_length if content_length is not None else allowed + 1
        received = 0
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
            self._cut_parts(buffer)
            self._beat_if_due(record=hasher is None)
        if self.length == 0:
            self._cut_parts(buffer)  # an empty file: one empty part
        if interrupted or (content_length is not None and received < content_length):
            # The client went away: whole parts count; without a checksum the rest is kept as the tail (tus: keep
            # as much as possible), with one nothing of an unverified body counts.
            if hasher is None:
                self._end(bytes(buffer) if buffer and self.next <= self.count else None)
            raise BadRequest("body_incomplete")
        if hasher is not None and checksum is not None and hasher.digest() != checksum[1]:
            self._drop_unrecorded([number for number, _, _ in self.pending])
            raise ChecksumMismatch("checksum_mismatch")
        if self.next > self.count:
            return self._complete()
        return self._end(bytes(buffer) if buffer and (received or self.cut) else None)

    def _cut_parts(self, buffer: bytearray) -> None:
        """Write every whole part the buffer holds; each is pending until it is recorded."""
        while self.next <= self.count and len(buffer) >= self._expected(self.next):
            size = self._expected(self.next)
            try:
                part = self.rt.files.put_part(self.upload.file, self.upload.ref, self.next, bytes(buffer[:size]))
            except (StorageError, NotFound):
                # S3 refuses a part of a multipart upload that an abort just ended: answer what the row says
                # (the record finds the session ended); the parts that did arrive count when it is still open.
                self._record(self._tail_now())
                raise
            del buffer[:size]
            self.pending.append((self.next, size, part.etag))
            self.cut = True
            self.next += 1

    def _expected(self, number: int) -> int:
        return expected_part_size(self.length, self.part_size, number)

    def _tail(self) -> bytes:
        """The tail's counted bytes. A tail shorter than its row says (lost with its store) sets the upload
        back to its last whole part: the client asks the offset again (409) and sends from there."""
        if not self.counted_tail:
            return b""
        data = self.rt.files.read_tail(self.upload.file, self.next)  # b"": missing, or sealed bytes that do not open
        if len(data) < self.counted_tail:
            log_event(
                log,
                "warning",
                "tus.tail_lost",
                "the tail of an upload was shorter than recorded; the upload resumes from its last whole part",
                file_id=str(self.file_id),
            )
            self._record(0)
            raise Conflict("offset_mismatch", "The upload's offset moved back; ask it with HEAD.")
        return data[: self.counted_tail]

    def _tail_now(self) -> int:
        """The tail bytes that count once the pending parts are recorded: none once a part took them."""
        return 0 if self.cut else self.counted_tail

    def _end(self, tail: bytes | None) -> TusUpload:
        """The body ended short of the last byte: keep the rest as the tail, record it with the pending parts
        and end the lease, in one transaction (two when a counted tail must first stop counting)."""
        if tail is not None:
            if self.pending and self.counted_tail:
                # Written before it is counted: the row must not count the old tail while the object holds
                # other bytes (a tail longer than counted is read only as far as counted, so without a part cut
                # the old tail is the new one's beginning and overwriting it is safe).
                self._record(0)
            self.rt.files.write_tail(self.upload.file, self.next, tail)
        recorded = self._record(len(tail) if tail is not None else self._tail_now(), end=True)
        assert isinstance(recorded, Upload)
        return _view(recorded)

    def _complete(self) -> Completion:
        """Every part is written: record the last ones and begin the completion in one transaction."""
        recorded = self._record(0, end=True, complete=True)
        if isinstance(recorded, LetheError):
            raise recorded  # the parts count; the completion could not begin (another has the lease)
        assert isinstance(recorded, Completion)
        return recorded

    def _record(
        self, tail_bytes: int, end: bool = False, complete: bool = False
    ) -> Upload | Completion | LetheError | None:
        """Record the pending parts and the tail under the row lock, if the session is still open and the lease
        still this PATCH's; renew the lease, or end it (`end`: the upload as recorded is returned), and begin
        the completion (`complete`: the completion, or the error that refused it, is returned)."""
        parts, now = list(self.pending), self.rt.clock.now()

        def record(uow: UnitOfWork) -> tuple[bool, Upload | Completion | LetheError | None]:
            try:
                upload = visible(uow.conn, self.principal, self.file_id, lock=True)
            except NotFound:
                return False, None
            locked = upload.session
            if locked.state != "open" or now >= locked.expires_at or locked.writing_since != self.leased_at:
                return False, None
            for number, size, etag in parts:
                sessions_sql.upsert_part(uow.conn, self.file_id, number, size, etag, now)
            sessions_sql.set_tail(uow.conn, self.file_id, tail_bytes)
            if not end:
                sessions_sql.renew_write_lease(uow.conn, self.file_id, self.leased_at, now)
                return True, None
            sessions_sql.end_write_lease(uow.conn, self.file_id, self.leased_at)
            if complete:
                try:
                    with uow.savepoint():
                        return True, sessions.begin_completion(self.rt, uow, self.principal, upload)
                except LetheError as exc:
                    return True, exc
            return True, visible(uow.conn, self.principal, self.file_id).with_parts(uow.conn)

        kept, answer = self.rt.db.unit_of_work(record, name="tus.record")
        if not kept:
            self._ended()
        self.pending.clear()
        self.counted_tail, self.cut = tail_bytes, False
        self.leased_at, self.last_beat = now, time.monotonic()
        self.lease_ended = end
        return answer

    def _beat_if_due(self, record: bool) -> None:
        """Renew the lease while the body arrives (a quarter of file.write_timeout), recording the parts
        written since the last renewal when they may count already (no checksum to wait for)."""
        if time.monotonic() - self.last_beat < self.beat_every:
            return
        if record:
            self._record(self._tail_now())
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
        store = self.upload.file.store
        keys_of_parts = self.rt.store_named(store).part_keys(str(self.file_id), max(numbers, default=0))
        sessions.remove_strays(
            self.rt,
            self.file_id,
            [keys_of_parts[number - 1] for number in numbers if number <= len(keys_of_parts)],
            store=store,
        )

    def _ended(self) -> None:
        """The session ended (terminated, expired, deleted, completed) or another PATCH took it over while this
        one wrote: unless it is another PATCH's now, what the session left goes as the one rule allows (a
        legal hold keeps every part and the tail; a session that completed keeps its file); then answer what
        the row says."""
        taken_over = self.rt.db.read(lambda conn: _taken_over(conn, self.file_id, self.leased_at))
        if not taken_over:
            sessions.remove_ended(self.rt, self.upload)
        self.lease_ended = True  # no longer this PATCH's to end
        self.rt.db.read(lambda conn: _check_tus_alive(visible(conn, self.principal, self.file_id), self.rt.clock.now()))
        raise Conflict("upload_busy" if taken_over else "upload_not_open")

    def end_lease(self) -> None:
        """End the write lease unless a record ended it (a PATCH that failed leaves the session to the next one
        at once)."""
        if self.lease_ended:
            return
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
