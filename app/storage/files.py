# Nothing of a file leaves the store but through here, and only for a file the one rule for bytes freed: every
# removal method takes the Clearance the rule answered right before it (app/db/keeps.py) and skips every file
# the clearance keeps. A key that is not the named file's is never deleted on its behalf (K3), and a key of the
# file schema is never deleted as someone else's (the unmanaged prefixes).
"""The facade in front of the object store for a file's objects: which keys a file owns, their reading for a
reader, and their removal.

The ObjectStore stays a plain transport; this is the only code that calls its delete and abort operations
(tests/unit/test_one_rule.py checks it).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import BinaryIO, Generator, Iterable, Mapping, Sequence

from app.domain.ends import Clearance
from app.domain.keys import VARIANTS
from app.domain.objects import FileObjects, owner_of
from app.errors import ObjectFailed
from app.storage.base import DeleteFailure, MultipartRef, ObjectStore


class FileStore:
    """A file's objects on an ObjectStore: their keys, and their removal under the one rule."""

    def __init__(self, store: ObjectStore):
        self.store = store

    # -- reading a file's objects: the one way their bytes leave for a reader (the codec lands here) ------

    def read(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        """A stored object of a file from byte `first`, `length` bytes (None: to its end). Raises NotFound."""
        return self.store.open(key, first, length)

    def local_file(self, key: str) -> BinaryIO | None:
        """The whole object as a local file the server may send itself, or None (a remote store)."""
        return self.store.open_file(key)

    def presigned(self, key: str, expires_in: timedelta, content_type: str, disposition: str) -> str:
        """A URL that reads the object directly from the store for `expires_in` (S3)."""
        return self.store.presign_get(key, expires_in, content_type, disposition)

    def write_variant(self, objects: FileObjects, name: str, data: bytes, content_type: str) -> None:
        """Write one variant of a file under the key schema's name for it (atomic, overwrites)."""
        self.store.put(objects.variant(name), data, len(data), content_type)

    def keys_of(self, objects: FileObjects, with_tail: bool | None = None) -> list[str]:
        """Every key of the file's own objects and of its upload's parts where the driver stores them as
        objects (fs), whatever its session's state: a part that landed after a completion goes with its
        file."""
        return objects.object_keys(with_tail) + self.store.part_keys(str(objects.file_id), objects.part_count)

    def count_keys(self, objects: FileObjects) -> int:
        """How many keys keys_of names (for receipts and metrics), without building them."""
        return objects.revision + 1 + len(VARIANTS) + (1 if objects.tail else 0) + \
            len(self.store.part_keys(str(objects.file_id), objects.part_count))

    def remove(self, clearance: Clearance, files: Sequence[FileObjects]) -> dict[uuid.UUID, str]:
        """Remove everything of the freed files: their objects in batch deletes, then the multipart upload of
        each whose session did not complete. A missing object is removed.

        Returns:
            The files the store refused (one key or one upload), with the store's code: the others went.

        Raises:
            StorageError: the store as a whole failed; nothing is known of the keys not yet answered.
        """
        chosen = [objects for objects in files if objects.file_id in clearance]
        owner = {key: objects.file_id for objects in chosen for key in self.keys_of(objects)}
        refused: dict[uuid.UUID, str] = {}
        for failure in self.store.delete_many(owner):
            refused.setdefault(owner[failure.key], failure.code or "refused")
        for objects in chosen:
            if objects.parts_open and objects.upload_id and objects.file_id not in refused:
                try:
                    self.store.abort_upload(self._ref(objects, objects.upload_id), objects.part_count)
                except ObjectFailed as exc:
                    refused[objects.file_id] = exc.store_code or "refused"
        return refused

    def remove_keys(self, clearance: Clearance, keys: Mapping[uuid.UUID, Iterable[str]]) -> list[DeleteFailure]:
        """Remove these keys of the freed files (strays past a completion, what a read of the store found
        left); a key that is not its file's is refused as a DeleteFailure, never deleted (K3)."""
        doomed: list[str] = []
        wrong: list[DeleteFailure] = []
        for file_id, file_keys in keys.items():
            if file_id not in clearance:
                continue
            for key in file_keys:
                (doomed.append(key) if owner_of(key) == file_id else wrong.append(DeleteFailure(key, "not_its_key")))
        return wrong + (self.store.delete_many(doomed) if doomed else [])

    def abort_uploads(self, clearance: Clearance, uploads: Mapping[uuid.UUID, Sequence[MultipartRef]]) -> int:
        """Abort these multipart uploads of the freed files (a repeated abort, or one the store still lists);
        returns how many were aborted. Raises ObjectFailed when the store refused one."""
        aborted = 0
        for file_id, refs in uploads.items():
            if file_id not in clearance:
                continue
            for ref in refs:
                if owner_of(ref.key) != file_id or ref.file_id != str(file_id):
                    raise ObjectFailed("an upload that is not the file's own", store_code="not_its_key")
                self.store.abort_upload(ref, 0)
                aborted += 1
        return aborted

    def remove_unmanaged(self, keys: Sequence[str]) -> list[DeleteFailure]:
        """Remove keys of a prefix other software writes (D16's sweeps): never a key of the file schema."""
        return [DeleteFailure(key, "file_key") for key in keys if owner_of(key) is not None] + \
            self.store.delete_many([key for key in keys if owner_of(key) is None])

    @staticmethod
    def _ref(objects: FileObjects, upload_id: str | None) -> MultipartRef:
        return MultipartRef(file_id=str(objects.file_id), key=objects.object_key or "", upload_id=upload_id)
