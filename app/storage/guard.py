"""D4 K1: no object store call runs inside a database transaction.

GuardedStore implements the ObjectStore port method by method: each checks that the calling thread has no
unit of work open (else StoreCallInTransaction) and delegates to the driver. The factory applies it
everywhere, so a violation fails loudly in tests and in production alike rather than holding row locks
across a slow network call. tests/unit/test_guard.py fails if a port method is left unguarded.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import BinaryIO

from app.errors import StoreCallInTransaction
from app.storage.base import (
    DeleteFailure,
    Driver,
    ListedObject,
    ListedPart,
    ListedUpload,
    MultipartRef,
    ObjectInfo,
    Store,
    UploadedPart,
)
from app.storage.defaults import Completed


class GuardedStore:
    """An ObjectStore that refuses calls made inside a unit of work."""

    def __init__(self, driver: Driver, in_transaction: Callable[[], bool]):
        self._store: Store = Completed(driver)  # the driver's capabilities, Lethe's defaults for the rest
        self._in_transaction = in_transaction
        self.driver = driver.driver
        self.supports_direct = self._store.supports_direct
        self.inner = driver  # the driver itself, unguarded (benchmarks compare Lethe's path with it)

    def _checked(self, name: str) -> Store:
        if self._in_transaction():
            raise StoreCallInTransaction(f"object store call {name} inside a unit of work (D4 K1)")
        return self._store

    def put(
        self,
        key: str,
        data: BinaryIO | bytes | Iterable[bytes],
        length: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> None:
        self._checked("put").put(key, data, length, content_type)

    def put_md5(self, key: str, data: bytes) -> str | None:
        return self._checked("put_md5").put_md5(key, data)

    def open_file(self, key: str) -> BinaryIO | None:
        return self._checked("open_file").open_file(key)

    def presign_get(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        return self._checked("presign_get").presign_get(key, expires_in, content_type, disposition)

    def open(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        return self._checked("open").open(key, first, length)

    def get(self, key: str) -> bytes:
        return self._checked("get").get(key)

    def head(self, key: str) -> ObjectInfo | None:
        return self._checked("head").head(key)

    def delete(self, key: str) -> None:
        self._checked("delete").delete(key)

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        return self._checked("delete_many").delete_many(keys)

    def begin_upload(self, file_id: str, key: str, content_type: str) -> MultipartRef:
        return self._checked("begin_upload").begin_upload(file_id, key, content_type)

    def put_part(self, ref: MultipartRef, part_number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        return self._checked("put_part").put_part(ref, part_number, data)

    def part_keys(self, file_id: str, part_count: int) -> list[str]:
        return self._checked("part_keys").part_keys(file_id, part_count)

    def complete_upload(self, ref: MultipartRef, parts: Sequence[UploadedPart]) -> ObjectInfo:
        return self._checked("complete_upload").complete_upload(ref, parts)

    def abort_upload(self, ref: MultipartRef, part_count: int) -> None:
        self._checked("abort_upload").abort_upload(ref, part_count)

    def presign_part(self, ref: MultipartRef, part_number: int, expires_in: timedelta) -> str:
        return self._checked("presign_part").presign_part(ref, part_number, expires_in)

    def list_parts(self, ref: MultipartRef) -> list[ListedPart]:
        return self._checked("list_parts").list_parts(ref)

    def uploads_of(self, key: str) -> list[str]:
        return self._checked("uploads_of").uploads_of(key)

    def list_uploads(self, prefix: str) -> Iterator[ListedUpload]:
        return self._checked("list_uploads").list_uploads(prefix)

    def check(self) -> None:
        self._checked("check").check()

    def describe(self) -> dict[str, str]:
        return self._checked("describe").describe()

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        return self._checked("sweep_tmp").sweep_tmp(older_than, dry_run)

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        return self._checked("list_prefix").list_prefix(prefix, after)

    def prune_dirs(self, prefix: str) -> int:
        return self._checked("prune_dirs").prune_dirs(prefix)

    def remains(self, keys: Sequence[str]) -> list[str]:
        return self._checked("remains").remains(keys)
