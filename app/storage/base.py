"""The store driver's contract and the ports the services hold (D4). Drivers: `fs.FsStore` (default) and
`s3.S3Store`; a driver implements `Driver` and whichever capabilities its store has.

Rules every driver keeps:
- every key is validated (app.domain.keys.validate_key) before any I/O;
- put is atomic: a reader sees the whole object or none;
- delete and delete_many are idempotent: a missing object counts as deleted, and on a bucket that keeps
  versions every version and delete marker of the key goes too (D16), so nothing of it can be read back;
- delete_many isolates one refused object (it returns it as a DeleteFailure) and raises StorageError only
  when the store as a whole failed, so one poisoned file never holds back the others (D7);
- abort_upload is idempotent: aborting an unknown or finished upload succeeds;
- nothing lists the key space (K2) on the normal path: only the fs driver's sweep of its own `.tmp`, the
  sweep of a declared unmanaged prefix and the operator's audit (D16) call list_prefix.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import BinaryIO, Protocol, runtime_checkable


@dataclass(frozen=True)
class ObjectInfo:
    size_bytes: int
    sha256: str | None = None  # an assembly that read the bytes gives their digest (fs); else None


@dataclass(frozen=True)
class ListedObject:
    """One object found by list_prefix: its key and when it was last written (timezone-aware; whole seconds
    on S3). A symbolic link on fs is an object of its own (never followed)."""

    key: str
    modified_at: datetime


# The code of a DeleteFailure for a version the bucket's object lock keeps until its retain-until date.
OBJECT_LOCKED = "ObjectLocked"


@dataclass(frozen=True)
class DeleteFailure:
    """One key the store refused to delete, with the store's own code (an S3 error code, an errno name).
    The key stays inside Lethe: only the file id it belongs to may reach a log (D15)."""

    key: str
    code: str


@dataclass(frozen=True)
class MultipartRef:
    """A multipart upload as its driver understands it, rebuilt from the rows: the file id, the original's
    key, and the driver's upload id (S3's, stored in upload_sessions.storage_upload_id; None with fs)."""

    file_id: str
    key: str
    upload_id: str | None = None


@dataclass(frozen=True)
class UploadedPart:
    part_number: int
    etag: str


@dataclass(frozen=True)
class ListedPart:
    """One part the store holds of a multipart upload, as the store lists it (never as a client says)."""

    part_number: int
    size_bytes: int
    etag: str


@dataclass(frozen=True)
class ListedUpload:
    """One unfinished multipart upload the store lists (the audit): its key, its id, when it began."""

    key: str
    upload_id: str
    initiated_at: datetime | None


class Objects(Protocol):
    """Whole objects: what every store holds, and what the services' port (ObjectStore) reads of a driver."""

    driver: str

    def put(
        self,
        key: str,
        data: BinaryIO | bytes | Iterable[bytes],
        length: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> None:
        """Write a whole object atomically (overwrites), from bytes, a file or chunks as they come; with
        `length`, a stream that ends before it raises StorageError and leaves nothing."""

    def open(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        """Stream an object in chunks, from byte `first`, `length` bytes (None: to its end). Raises NotFound when
        it is missing (before the first chunk). Close the iterator when done."""

    def get(self, key: str) -> bytes:
        """Read a whole object. Raises NotFound when it is missing."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size, or None when it is missing."""

    def delete(self, key: str) -> None:
        """Delete one object; a missing object is deleted. Raises ObjectFailed when the store refused it."""

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        """Delete objects in batches; missing ones are deleted.

        Returns:
            The keys the store refused one by one (empty when every key is gone).

        Raises:
            StorageError: the store as a whole failed (unreachable, timed out, 5xx): nothing is known of
                the keys not yet answered.
        """

    def check(self) -> None:
        """Raise StorageError when the store is not reachable (readiness)."""

    def describe(self) -> dict[str, str]:
        """What the driver found of its store at start, for one log line (no secret, no key)."""


class Driver(Objects, Protocol):
    """What every store driver implements: nine operations. Everything else a store can do is a capability
    below, which a driver may add; where it has none, app/storage/defaults.py answers for it (parts as objects
    of their own, no presigned URLs, a head per key for the erasure's proof)."""

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        """Every object under `prefix` (which ends with `/`), in ascending key order, page by page: never
        the whole listing in memory; with `after`, only the keys after it. Only for D16's sweeps and audit
        and the deletion journal's own prefix (K2). A key that cannot be addressed (a control character) is
        listed as it is; the caller filters it."""


# -- capabilities a driver may add (each checked by isinstance; see app/storage/defaults.py) -------------------


class UploadParts(Protocol):
    """Multipart uploads of the store's own (S3). Without it, parts are objects of their own under
    `uploads/<file_id>/part-<n>`, assembled by a read of each (what the fs driver does)."""

    def begin_upload(self, file_id: str, key: str, content_type: str) -> MultipartRef:
        """Start a multipart upload of the object `key` of a file."""

    def put_part(self, ref: MultipartRef, part_number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        """Store one part (overwrites a part with the same number), from bytes or from chunks as they arrive
        (an error raised by the chunks leaves nothing stored). Raises NotFound when the upload ended."""

    def part_keys(self, file_id: str, part_count: int) -> list[str]:
        """The keys an upload's parts are stored under, when parts are objects of their own (fs:
        `uploads/<id>/part-1..N`); empty where they belong to a multipart upload (S3). No I/O."""

    def complete_upload(self, ref: MultipartRef, parts: Sequence[UploadedPart]) -> ObjectInfo:
        """Assemble the parts, in order, into the object `ref.key` and drop the parts; a driver that reads the
        bytes on the way gives their sha256 in the answer, so that nobody reads them again."""

    def abort_upload(self, ref: MultipartRef, part_count: int) -> None:
        """Drop every part of an upload (fs: part-1..part-N; s3: abort the multipart upload). Idempotent.
        Raises ObjectFailed when the store refused this upload's objects, StorageError when it failed."""

    def list_parts(self, ref: MultipartRef) -> list[ListedPart]:
        """Every part the store holds of the multipart upload, in order (ListParts, paged). Raises NotFound
        when the upload ended (completed or aborted)."""

    def uploads_of(self, key: str) -> list[str]:
        """The ids of the unfinished multipart uploads on exactly this key (ListMultipartUploads for the key:
        never the key space); fs: none."""


@runtime_checkable
class NativeMultipart(UploadParts, Protocol):
    """The capability: the store's own multipart uploads, and their listing for the audit."""

    def list_uploads(self, prefix: str) -> Iterator[ListedUpload]:
        """Every unfinished multipart upload under `prefix`, page by page (the audit); fs: none."""


@runtime_checkable
class Presigning(Protocol):
    """URLs a client uses without Lethe (S3): downloads by redirect and direct uploads. Without it, both are
    refused (`supports_direct` is false) and every byte goes through the api."""

    def presign_get(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        """A URL that reads the object by a plain GET for `expires_in`, answered with these Content-Type and
        Content-Disposition headers and never cached. Local: no request."""

    def presign_part(self, ref: MultipartRef, part_number: int, expires_in: timedelta) -> str:
        """A URL that takes part n of the multipart upload by a plain PUT, for `expires_in` (direct uploads).
        Local: no request to the store."""


@runtime_checkable
class LocalFiles(Protocol):
    """Objects that are files on this machine (fs): the server sends them itself (sendfile)."""

    def open_file(self, key: str) -> BinaryIO | None:
        """The object as a local file the server may send itself, or None when it cannot. Raises NotFound when
        it is missing. The caller closes it."""


@runtime_checkable
class ReportedMd5(Protocol):
    """A store that checks a Content-MD5 and reports the MD5 of what it stored (S3's ETag of a single PUT):
    a copy between stores is verified without a read back. Without it, the copy is read back."""

    def put_md5(self, key: str, data: bytes) -> str | None:
        """Write a whole object from memory with its Content-MD5 (a store that checks it refuses a body that does
        not match), and answer the MD5 (hex) the store reports of what it stored when it is one (not under a
        KMS key), else None (the caller reads the object back)."""


@runtime_checkable
class Versions(Protocol):
    """A bucket that may keep versions and delete markers: the erasure's proof looks for them too. Without it,
    a head per key is the proof."""

    def remains(self, keys: Sequence[str]) -> list[str]:
        """Of these keys, those of which the store still holds anything, found by reading it: the object (a
        head), and on a bucket that keeps versions any version or delete marker. The erasure's proof (D16)."""


@runtime_checkable
class ScratchArea(Protocol):
    """A driver's own temporary area and directories (fs): the cleanup sweeps them. Without it, nothing to do."""

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        """Remove the driver's own temporary entries older than `older_than` (only count them with
        dry_run); returns how many (cleanup e)."""

    def prune_dirs(self, prefix: str) -> int:
        """Remove the empty directories below `prefix`, deepest first, never following a link, keeping the
        prefix's own directory; returns how many."""


# -- the ports the services hold: a driver completed by app/storage/defaults.py, behind the K1 guard ---------


class ObjectStore(Objects, UploadParts, Protocol):
    """What Lethe's normal paths need of an object store, and nothing more: no listing (K2 is a type). A driver
    completed by app/storage/defaults.py: a capability it lacks answers as its default says."""

    supports_direct: bool  # presigned URLs: direct uploads and downloads by redirect (Presigning)

    def put_md5(self, key: str, data: bytes) -> str | None:
        """ReportedMd5.put_md5; without the capability, a put that answers None."""

    def open_file(self, key: str) -> BinaryIO | None:
        """LocalFiles.open_file; without the capability, None."""

    def presign_get(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        """Presigning.presign_get; without the capability, StorageError."""

    def presign_part(self, ref: MultipartRef, part_number: int, expires_in: timedelta) -> str:
        """Presigning.presign_part; without the capability, StorageError."""


class StoreMaintenance(Protocol):
    """What only the maintenance paths need (D16): the sweep of the driver's own temporary area (cleanup e),
    the erasure's confirming read, and the listings of the sweeps and the audit. The normal paths (uploads,
    purge, cleanup a to d) hold an ObjectStore, which has none of these: K2 ("the normal paths never list")
    is a type."""

    driver: str

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        """ScratchArea.sweep_tmp; without the capability, 0."""

    def remains(self, keys: Sequence[str]) -> list[str]:
        """Versions.remains; without the capability, the keys a head finds."""

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        """Driver.list_prefix."""

    def list_uploads(self, prefix: str) -> Iterator[ListedUpload]:
        """NativeMultipart.list_uploads; without the capability, none."""

    def prune_dirs(self, prefix: str) -> int:
        """ScratchArea.prune_dirs; without the capability, 0."""


class Store(ObjectStore, StoreMaintenance, Protocol):
    """Both ports: what app/storage/defaults.py makes of a driver, and the K1 guard wraps."""


def raise_on_failures(failures: Sequence[DeleteFailure]) -> None:
    """For callers that need every key gone: raise ObjectFailed (with the store's code only) on a refusal."""
    if failures:
        from app.errors import ObjectFailed

        raise ObjectFailed(f"the store refused a delete: {failures[0].code}", store_code=failures[0].code)
