"""A driver made whole: the nine operations of `Driver` go to the driver, and each capability it lacks gets
Lethe's default here. The K1 guard wraps what this makes, so the services hold one complete store whatever
the driver (see docs/contributing.md, "A store driver").

The defaults:
- multipart uploads (UploadParts): each part is an object of its own under `uploads/<file_id>/part-<n>`
  (D4), written as its chunks arrive; the completion reads them in order into the original, hashing the bytes
  on the way, then deletes them by name (never a listing: D7);
- presigned URLs (Presigning): none; direct uploads and downloads by redirect are refused (`supports_direct`);
- local files (LocalFiles): none; every read streams through `open`;
- a reported MD5 (ReportedMd5): a plain put, answered None (the caller reads the copy back);
- versions (Versions): the erasure's proof is a head per key;
- a scratch area (ScratchArea): nothing to sweep or prune.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import BinaryIO

from app.domain.keys import part_key
from app.errors import StorageError
from app.storage.base import (
    DeleteFailure,
    Driver,
    ListedObject,
    ListedPart,
    ListedUpload,
    LocalFiles,
    MultipartRef,
    NativeMultipart,
    ObjectInfo,
    Presigning,
    ReportedMd5,
    ScratchArea,
    UploadedPart,
    Versions,
    raise_on_failures,
)


class Completed:
    """A Store over a Driver: its own operations, its capabilities, Lethe's defaults for the rest."""

    def __init__(self, driver: Driver):
        self.raw = driver
        self.driver = driver.driver
        self._parts = driver if isinstance(driver, NativeMultipart) else PartsAsObjects(driver)
        self.supports_direct = isinstance(driver, Presigning) and getattr(driver, "supports_direct", True)

    # -- the driver's own -------------------------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: BinaryIO | bytes | Iterable[bytes],
        length: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> None:
        self.raw.put(key, data, length, content_type)

    def open(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        return self.raw.open(key, first, length)

    def get(self, key: str) -> bytes:
        return self.raw.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        return self.raw.head(key)

    def delete(self, key: str) -> None:
        self.raw.delete(key)

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        return self.raw.delete_many(keys)

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        return self.raw.list_prefix(prefix, after)

    def check(self) -> None:
        self.raw.check()

    def describe(self) -> dict[str, str]:
        return self.raw.describe()

    # -- capabilities, or their defaults -----------------------------------------------------------------------

    def begin_upload(self, file_id: str, key: str, content_type: str) -> MultipartRef:
        return self._parts.begin_upload(file_id, key, content_type)

    def put_part(self, ref: MultipartRef, part_number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        return self._parts.put_part(ref, part_number, data)

    def part_keys(self, file_id: str, part_count: int) -> list[str]:
        return self._parts.part_keys(file_id, part_count)

    def complete_upload(self, ref: MultipartRef, parts: Sequence[UploadedPart]) -> ObjectInfo:
        return self._parts.complete_upload(ref, parts)

    def abort_upload(self, ref: MultipartRef, part_count: int) -> None:
        self._parts.abort_upload(ref, part_count)

    def list_parts(self, ref: MultipartRef) -> list[ListedPart]:
        return self._parts.list_parts(ref)

    def uploads_of(self, key: str) -> list[str]:
        return self._parts.uploads_of(key)

    def list_uploads(self, prefix: str) -> Iterator[ListedUpload]:
        return self.raw.list_uploads(prefix) if isinstance(self.raw, NativeMultipart) else iter(())

    def presign_get(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        if not isinstance(self.raw, Presigning):
            raise StorageError(f"the {self.driver} driver has no presigned URLs")
        return self.raw.presign_get(key, expires_in, content_type, disposition)

    def presign_part(self, ref: MultipartRef, part_number: int, expires_in: timedelta) -> str:
        if not isinstance(self.raw, Presigning):
            raise StorageError(f"the {self.driver} driver has no direct uploads")
        return self.raw.presign_part(ref, part_number, expires_in)

    def open_file(self, key: str) -> BinaryIO | None:
        return self.raw.open_file(key) if isinstance(self.raw, LocalFiles) else None

    def put_md5(self, key: str, data: bytes) -> str | None:
        if isinstance(self.raw, ReportedMd5):
            return self.raw.put_md5(key, data)
        self.raw.put(key, data, len(data))
        return None

    def remains(self, keys: Sequence[str]) -> list[str]:
        if isinstance(self.raw, Versions):
            return self.raw.remains(keys)
        return [key for key in keys if self.raw.head(key) is not None]

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        return self.raw.sweep_tmp(older_than, dry_run) if isinstance(self.raw, ScratchArea) else 0

    def prune_dirs(self, prefix: str) -> int:
        return self.raw.prune_dirs(prefix) if isinstance(self.raw, ScratchArea) else 0


class PartsAsObjects:
    """Multipart uploads for a driver without them: each part an object of its own (D4)."""

    def __init__(self, driver: Driver):
        self.driver = driver

    def begin_upload(self, file_id: str, key: str, content_type: str) -> MultipartRef:
        return MultipartRef(file_id=file_id, key=key)

    def put_part(self, ref: MultipartRef, part_number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        # Written chunk by chunk as the body arrives: no part is held in memory. No digest of the part: its
        # etag is only the size written (an md5 cost 18 ms of each 8 MiB part on fs); the completion checks
        # the whole file's size and sha256.
        written = _Counted(data)
        self.driver.put(part_key(ref.file_id, part_number), written)
        return UploadedPart(part_number=part_number, etag=f"size-{written.size}")

    def part_keys(self, file_id: str, part_count: int) -> list[str]:
        return [part_key(file_id, n) for n in range(1, part_count + 1)]

    def complete_upload(self, ref: MultipartRef, parts: Sequence[UploadedPart]) -> ObjectInfo:
        ordered = sorted(parts, key=lambda part: part.part_number)
        digest = hashlib.sha256()
        assembled = _Counted(self._read(ref, ordered), digest)  # hashed as it is copied: read once
        self.driver.put(ref.key, assembled)
        raise_on_failures(self.driver.delete_many(part_key(ref.file_id, part.part_number) for part in ordered))
        return ObjectInfo(size_bytes=assembled.size, sha256=digest.hexdigest())

    def _read(self, ref: MultipartRef, ordered: Sequence[UploadedPart]) -> Iterator[bytes]:
        for part in ordered:
            chunks = self.driver.open(part_key(ref.file_id, part.part_number))
            try:
                yield from chunks
            finally:
                chunks.close()

    def abort_upload(self, ref: MultipartRef, part_count: int) -> None:
        # D7: the parts are deleted by name, part-1..part-N; the upload's prefix is never listed.
        raise_on_failures(self.driver.delete_many(self.part_keys(ref.file_id, part_count)))

    def list_parts(self, ref: MultipartRef) -> list[ListedPart]:
        raise StorageError(f"the {self.driver.driver} driver has no direct uploads")

    def uploads_of(self, key: str) -> list[str]:
        return []  # parts are objects of their own (part_keys), not an upload of the store


class _Counted:
    """Chunks passed on as they come, counted (and hashed when asked)."""

    def __init__(self, data: bytes | Iterable[bytes], digest: hashlib._Hash | None = None):
        self._chunks: Iterable[bytes] = (bytes(data),) if isinstance(data, (bytes, bytearray, memoryview)) else data
        self._digest = digest
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.size += len(chunk)
            if self._digest is not None:
                self._digest.update(chunk)
            yield chunk
