"""The ObjectStore port (D4). Drivers: `fs.FsStore` (default) and `s3.S3Store`.

Rules every driver keeps:
- every key is validated (app.domain.keys.validate_key) before any I/O;
- put is atomic: a reader sees the whole object or none;
- delete and delete_many are idempotent: a missing object counts as deleted;
- abort_upload is idempotent: aborting an unknown or finished upload succeeds;
- nothing lists the key space (K2), except the fs driver's sweep of its own `.tmp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Iterable, Iterator, Protocol, Sequence


@dataclass(frozen=True)
class ObjectInfo:
    size_bytes: int


@dataclass(frozen=True)
class UploadedPart:
    part_number: int
    etag: str


class ObjectStore(Protocol):
    """What Lethe needs of an object store, and nothing more."""

    driver: str

    def put(self, key: str, data: BinaryIO | bytes, length: int, content_type: str = "application/octet-stream") -> None:
        """Write a whole object atomically (overwrites)."""

    def open(self, key: str) -> Iterator[bytes]:
        """Stream an object in chunks. Raises NotFound when it is missing. Close the iterator when done."""

    def get(self, key: str) -> bytes:
        """Read a whole object. Raises NotFound when it is missing."""

    def head(self, key: str) -> ObjectInfo | None:
        """The object's size, or None when it is missing."""

    def delete(self, key: str) -> None:
        """Delete one object; a missing object is deleted."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete objects in batches; missing ones are deleted. Raises StorageError on the first failure."""

    def begin_upload(self, file_id: str, key: str, content_type: str) -> str | None:
        """Start a multipart upload of the object `key`; returns the driver's upload id (None for fs)."""

    def put_part(self, file_id: str, key: str, upload_id: str | None, part_number: int, data: bytes) -> UploadedPart:
        """Store one part (overwrites a part with the same number)."""

    def complete_upload(self, file_id: str, key: str, upload_id: str | None, parts: Sequence[UploadedPart]) -> ObjectInfo:
        """Assemble the parts, in order, into the object `key` and drop the parts."""

    def abort_upload(self, file_id: str, key: str, upload_id: str | None, part_count: int) -> None:
        """Drop every part of an upload (fs: part-1..part-N; s3: abort the multipart upload). Idempotent."""

    def check(self) -> None:
        """Raise StorageError when the store is not reachable (readiness)."""

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        """Remove the driver's own temporary entries older than `older_than` (only count them with
        dry_run); returns how many (fs only)."""
