# An upload writes objects before the rows that reference them and never inside a transaction (D4 K1): each
# store call runs between units of work, and a unit of work re-checks under the file's row lock what the
# earlier read saw. What an ended session leaves is removed only as the one rule for bytes allows (a legal
# hold keeps it whole, for the purge after the release); a stray part is never dropped by ending a whole
# multipart upload that still counts other parts.
"""The upload session core (D13, D19): what native parts, tus PATCHes and direct uploads share.

An upload is a file row and its session row, read together under one check (`visible`: the caller's own live
upload, else 404). The transports are thin: each writes bytes to the store between transactions, then records
what it wrote under the row lock; the request that brings the last byte begins the completion in the
transaction that records it (`begin_completion`: the completion's lease), the store assembles and measures
the original outside any transaction (`assemble`), and one more transaction records the end
(`finish_completion`), taking the one rule's answer for the copies left over with it. A tus PATCH that brings
the last byte so runs three transactions: its write lease, its parts with the completion begun, the
completion recorded.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from app.content.detect import detect_stored
from app.db import files as files_sql
from app.db import keeps as keeps_sql
from app.db import sessions as sessions_sql
from app.db.conn import Conn
from app.db.events import announce_settled, write_file_updated
from app.db.files import FileRow
from app.db.sessions import PartRow, SessionRow
from app.db.uow import UnitOfWork
from app.domain import access
from app.domain.access import Principal
from app.domain.ends import Clearance, FilesSettled, Reach
from app.domain.objects import FileObjects
from app.domain.uploads import PROTOCOLS, Protocol, lease_in_force, listed_parts_problem
from app.domain.webhooks import FILE_FAILED
from app.errors import Conflict, ContentCorrupt, Forbidden, Gone, KeyUnavailable, NotFound, StorageError
from app.platform.jobs import enqueue_purge, enqueue_scan
from app.platform.observability.logs import log_event
from app.platform.process import process_id
from app.storage.base import MultipartRef, UploadedPart

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.uploads")


@dataclass(frozen=True)
class Upload:
    """An upload as one transaction read it: the file, its session and the parts recorded (when asked)."""

    file: FileRow
    session: SessionRow
    parts: tuple[PartRow, ...] = ()

    @property
    def id(self) -> uuid.UUID:
        """The file's id (a session's is its file's)."""
        return self.file.id

    @property
    def protocol(self) -> Protocol:
        """How its bytes travel (app/domain/uploads.py)."""
        return PROTOCOLS[self.session.protocol]

    @property
    def ref(self) -> MultipartRef:
        """The store's reference to the upload, rebuilt from its rows."""
        return MultipartRef(
            file_id=str(self.file.id), key=self.file.object_key or "", upload_id=self.session.storage_upload_id
        )

    @property
    def objects(self) -> FileObjects:
        """What the upload's file owns in the store, from its rows: everything an ended session may have left."""
        return FileObjects(
            self.file.id,
            self.file.object_key,
            upload_id=self.session.storage_upload_id,
            part_count=self.session.part_count,
            parts_open=self.session.state != "completed",
            tail=self.protocol.keeps_tail,
            sealed=self.file.encrypted,
            store=self.file.store,
        )

    def with_parts(self, conn: Conn) -> Upload:
        """The same upload with the parts its session records now."""
        return replace(self, parts=tuple(sessions_sql.parts_of(conn, self.file.id)))


def visible(conn: Conn, principal: Principal, file_id: uuid.UUID, *, lock: bool = False) -> Upload:
    """The caller's own live upload, locked for this transaction when asked; NotFound otherwise (someone
    else's, unknown or deleted are the same 404)."""
    row = (files_sql.lock_file if lock else files_sql.file_by_id)(conn, file_id)
    if row is None or row.deleted_at is not None or not access.drives_upload(principal, row.uploaded_by):
        raise NotFound()
    session = (sessions_sql.lock_session if lock else sessions_sql.session_of)(conn, file_id)
    if session is None:
        raise NotFound()
    return Upload(row, session)


def require_write(principal: Principal) -> None:
    """An upload's bytes and its end need `files:write` (403 otherwise)."""
    if not access.may_write(principal):
        raise Forbidden("files:write")


def check_open(session: SessionRow, now: datetime) -> None:
    """An upload takes parts and completion only while open and before expires_at (D8: expired at
    expires_at exactly)."""
    if session.state == "expired" or (session.state == "open" and now >= session.expires_at):
        raise Gone("upload_expired")
    if session.state != "open":
        raise Conflict("upload_not_open")


def check_not_completing(rt: Runtime, session: SessionRow, now: datetime) -> None:
    """A completion has the upload's lease: no part, abort or second complete interleaves with it (409)."""
    if lease_in_force(session.completing_since, now, rt.limits.complete_timeout):
        raise Conflict("upload_completing", "A completion of this upload is in progress; retry shortly.")


def raise_what_the_row_says(rt: Runtime, principal: Principal, file_id: uuid.UUID) -> None:
    """After a store call or a record failed: raise what the upload's row says now (404, 410, 409 not open
    or completing); return when it is still open and no completion has its lease."""

    def check(conn: Conn) -> None:
        session = visible(conn, principal, file_id).session
        check_open(session, rt.clock.now())
        check_not_completing(rt, session, rt.clock.now())

    rt.db.read(check)


def clearance(rt: Runtime, file_id: uuid.UUID, reach: Reach) -> Clearance:
    """The one rule's answer for this file's bytes, right before a removal (its own short transaction)."""
    return rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, [file_id], reach, rt.clock.now()), name="upload.clear"
    )


def remove_ended(rt: Runtime, upload: Upload) -> bool:
    """Remove what an ended session (aborted, expired, deleted) left in the store, as the one rule allows: its
    parts or multipart upload, its tail, an original assembled too late. The purge job committed with the
    ending names the same objects, so a failure here leaves them to it.

    Returns:
        Whether the rule keeps them (a legal hold: the purge after its release removes them).
    """
    try:
        cleared = clearance(rt, upload.id, Reach.FILE)
        if upload.id not in cleared:
            return True
        refused = rt.files.remove(cleared, [upload.objects]).refused
    except (StorageError, psycopg.Error):
        refused = {upload.id: "unavailable"}
    if refused:
        log_event(
            log,
            "warning",
            "upload.removal_deferred",
            "what an ended upload left is left to its purge job",
            file_id=str(upload.id),
        )
    return False


def remove_strays(
    rt: Runtime, file_id: uuid.UUID, keys_of_file: list[str], cleared: Clearance | None = None, store: str | None = None
) -> None:
    """Remove copies no row counts of a file that lives on (parts written after its completion, a tail whose
    bytes went into the last part, parts of a body that failed its checksum), unless a legal hold keeps them:
    they then go with the file's purge. `cleared`: the rule's answer a transaction of the caller took (else
    one is asked now). `store`: the file's (None: the primary). A failure leaves them to the purge or to
    `lethe audit`."""
    if not keys_of_file:
        return
    try:
        rt.files.remove_keys(cleared or clearance(rt, file_id, Reach.STRAY), {file_id: keys_of_file}, store=store)
    except (StorageError, psycopg.Error):
        log_event(
            log,
            "warning",
            "upload.strays_left",
            "copies of an upload's bytes could not be removed; they go with the file",
            file_id=str(file_id),
        )


def parts_missing(missing: list[int]) -> str:
    """Which parts a completion still waits for (the detail of parts_missing)."""
    shown = ", ".join(str(number) for number in missing[:20]) + (
        f" and {len(missing) - 20} more" if len(missing) > 20 else ""
    )
    return f"Part(s) {shown} have not arrived: send them (PUT .../parts/{{n}}), then complete again."


@dataclass(frozen=True)
class Completion:
    """A completion that holds its upload's lease (taken at `leased_at`), with the parts it assembles."""

    upload: Upload
    leased_at: datetime


@dataclass(frozen=True)
class Assembled:
    """What the store made of a completion's parts: the original's size and digest (None: the scan checks it),
    its detected type, or the reason the file fails."""

    completion: Completion
    reason: str | None
    digest: str | None = None
    detected: str | None = None


@dataclass(frozen=True)
class Finished:
    """A completion recorded: `recorded` (complete, or failed with `reason`), `done` (completed before), or
    `orphan` (the upload ended while it was assembled); the upload as the record left it, and the rule's
    answer for the copies no row counts any more."""

    outcome: str
    upload: Upload | None
    cleared: Clearance | None
    assembled: Assembled


def begin_completion(rt: Runtime, uow: UnitOfWork, principal: Principal, upload: Upload) -> Completion | None:
    """Take the completion's lease of an upload the caller's transaction holds locked, so that no second
    complete, abort or part upload interleaves with it. None: completed before (the same file is the answer).

    Raises:
        Conflict(parts_missing | upload_not_open | upload_completing), Gone(upload_expired), Forbidden.
    """
    require_write(principal)
    if upload.session.state == "completed":
        return None
    now = rt.clock.now()
    check_open(upload.session, now)
    check_not_completing(rt, upload.session, now)
    upload = upload.with_parts(uow.conn)
    # A direct upload's parts are in the store alone: the store lists them once the completion has the lease.
    if not upload.protocol.parts_in_store_alone:
        missing = sorted(set(range(1, upload.session.part_count + 1)) - {part.part_number for part in upload.parts})
        if missing:
            raise Conflict("parts_missing", parts_missing(missing))
    sessions_sql.take_completion_lease(uow.conn, upload.id, now, process_id())
    return Completion(upload, now)


def end_lease(rt: Runtime, completion: Completion) -> None:
    """Give the completion's lease back (the upload stays open for another completion)."""
    rt.db.unit_of_work(
        lambda uow: sessions_sql.end_completion_lease(uow.conn, completion.upload.id, completion.leased_at),
        name="upload.release",
    )


def assemble(rt: Runtime, principal: Principal, completion: Completion) -> Assembled:
    """Assemble the original from the parts and check it: its size, its sha256 where the upload declared one.
    Store work alone (no transaction) but where the lease is given back.

    Raises:
        KeyUnavailable (the lease given back: the configuration's trouble, not the upload's), StorageError
        or what the row says now (the lease given back), Conflict(parts_missing) (direct: the lease given back).
    """
    upload = completion.upload
    file_row, session = upload.file, upload.session
    reason = None  # a reason the file fails: the store's parts broke the plan (direct), or a check below
    size, digest, detected = 0, None, None
    try:
        uploaded = [UploadedPart(part.part_number, part.etag) for part in upload.parts]
        if upload.protocol.parts_in_store_alone:
            uploaded, reason = _listed_parts(rt, completion)
        if reason is None:
            # A driver that hashed the bytes while assembling them gives the digest, and a sealed original is
            # measured by opening it: either way the digest is of the plaintext. A direct upload that a scanner
            # will read has its digest checked in that read (the bytes are read once); it is not deliverable
            # before.
            size, digest = rt.files.complete(file_row, upload.ref, uploaded)
            if digest is None and not (
                upload.protocol.parts_in_store_alone and rt.limits.scan_reads(file_row.size_bytes)
            ):
                size, digest = rt.files.measure(file_row)
    except ContentCorrupt:
        reason = "content_corrupt"  # the assembled parts do not open as what was sealed: the file fails
    except KeyUnavailable:
        # The keyring cannot open the file's key (checked before the parts are assembled): the configuration's
        # trouble, not the upload's. It stays open for a completion once the keyring is right (503 meanwhile).
        end_lease(rt, completion)
        raise
    except (StorageError, NotFound):
        end_lease(rt, completion)
        # The upload may have been aborted or deleted meanwhile: answer what the row says, else 503.
        raise_what_the_row_says(rt, principal, upload.id)
        raise StorageError("the upload could not be assembled") from None
    if reason is None and size == file_row.size_bytes:
        detected = detect_stored(rt.files, file_row)  # inline display trusts this alone
    if reason is None and size != file_row.size_bytes:
        reason = "size_mismatch"
    elif reason is None and session.expected_sha256 and digest is not None and digest != session.expected_sha256:
        reason = "checksum_mismatch"  # (no digest yet: the scan checks it before the file is deliverable)
    return Assembled(completion, reason, digest, detected)


def _listed_parts(rt: Runtime, completion: Completion) -> tuple[list[UploadedPart], str | None]:
    """A direct upload's parts as the store lists them (ListParts), checked against the plan: the ETags and
    sizes come from the store, never from the client. Parts still missing end the lease and
    answer 409 parts_missing (the client may still send them); a wrong size or a part past the plan is final
    (size_mismatch: the file fails and its purge aborts the upload)."""
    upload = completion.upload
    listed = rt.store_named(upload.file.store).list_parts(upload.ref)
    problem = listed_parts_problem(
        [(part.part_number, part.size_bytes) for part in listed], upload.file.size_bytes, upload.session.part_size
    )
    if problem == "parts_missing":
        end_lease(rt, completion)
        raise Conflict("parts_missing")
    return [UploadedPart(part.part_number, part.etag) for part in listed], problem


def finish_completion(rt: Runtime, uow: UnitOfWork, principal: Principal, assembled: Assembled) -> Finished:
    """Record the completion under the row lock, in the caller's transaction: the file complete (its scan job
    committed with it) or failed (its purge job), unless the upload ended or another completion took it over
    meanwhile. The rule's answer for the copies no row counts (parts written after the assembly, a tus tail) is
    taken first in the same transaction, before the row lock, in the order a hold's placement takes them.

    Raises:
        Conflict(upload_completing): another completion took the lease over and owns the key now.
    """
    file_id = assembled.completion.upload.id
    cleared = keeps_sql.clearance(uow, [file_id], Reach.STRAY, rt.clock.now())
    try:
        upload = visible(uow.conn, principal, file_id, lock=True)
    except NotFound:
        return Finished("orphan", None, None, assembled)  # deleted meanwhile: its purge may already have run
    if upload.session.state == "completed":
        return Finished("done", upload, cleared, assembled)  # another completion (after our lease lapsed) did it
    if upload.session.state != "open":
        return Finished("orphan", None, None, assembled)  # aborted or expired: the row is failed, the object not
    if upload.session.completing_since != assembled.completion.leased_at:
        raise Conflict("upload_completing")  # taken over: the other completion owns the key now
    now = rt.clock.now()
    sessions_sql.delete_parts(uow.conn, file_id)
    if assembled.reason is None:
        # No digest yet: the scan checks it before the file is deliverable.
        files_sql.set_complete(uow.conn, file_id, assembled.digest, assembled.detected, now)
        sessions_sql.set_completed(uow.conn, file_id, now)
        write_file_updated(uow, file_id, principal.id, now)
        enqueue_scan(uow, file_id)
    else:
        files_sql.set_failed(uow.conn, file_id, now)
        sessions_sql.set_state(uow.conn, file_id, "aborted")
        write_file_updated(uow, file_id, principal.id, now)
        announce_settled(uow, FilesSettled(FILE_FAILED, (file_id,), now, reason=assembled.reason))
        enqueue_purge(uow, file_id)  # D7: final and not deliverable
    return Finished("recorded", visible(uow.conn, principal, file_id), cleared, assembled)


def after_completion(rt: Runtime, principal: Principal, finished: Finished, strays: list[str] | None = None) -> Upload:
    """What follows a completion's record, out of any transaction: the copies no row counts go as the rule
    answered (`strays`: the transport's own, a tus tail), what an upload that ended meanwhile left goes as the
    rule allows; then the answer.

    Returns:
        The upload, complete.

    Raises:
        Conflict(size_mismatch | checksum_mismatch | content_corrupt): the file is now failed;
        what the row says of an upload that ended meanwhile.
    """
    completion = finished.assembled.completion
    file_id = completion.upload.id
    if finished.outcome == "orphan" or finished.upload is None:
        # The upload ended while it was assembled (deleted, aborted, expired): the parts are in the object now,
        # which goes as the rule allows (a legal hold keeps it for the purge after the release).
        remove_ended(rt, completion.upload)
        raise_what_the_row_says(rt, principal, file_id)
        raise Conflict("upload_not_open")
    # A part PUT that passed its check before our lease may have landed after the assembly dropped the parts;
    # its own record saw the lease and answered 409 without removing it (D19): drop the parts once more.
    remove_strays(
        rt,
        file_id,
        (strays or [])
        + rt.store_named(completion.upload.file.store).part_keys(str(file_id), completion.upload.session.part_count),
        finished.cleared,
        store=completion.upload.file.store,
    )
    reason = finished.assembled.reason
    if finished.outcome == "done":
        return finished.upload
    if reason is not None:
        log_event(log, "info", "upload.failed", "upload failed verification", file_id=str(file_id), reason=reason)
        raise Conflict(reason)
    log_event(log, "info", "upload.completed", "upload completed", file_id=str(file_id))
    return finished.upload
