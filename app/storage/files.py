# Nothing of a file leaves the store but through here, and only for a file the one rule for bytes freed: every
# removal method takes the Clearance the rule answered right before it (app/db/keeps.py) and skips every file
# the clearance keeps. A key that is not the named file's is never deleted on its behalf (K3), and a key of the
# file schema is never deleted as someone else's (the unmanaged prefixes).
"""The facade in front of the object store for a file's objects: which keys a file owns, the sealing of their
bytes under the file's own data key, their reading for a reader, and their removal.

The ObjectStore stays a plain transport; this is the only code that calls its delete and abort operations
(tests/unit/test_one_rule.py checks it).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import BinaryIO, Protocol

from app.domain.ends import Clearance
from app.domain.keys import VARIANTS
from app.domain.objects import FileObjects, owner_of
from app.domain.sealing import HEADER_BYTES, SEALED_SEGMENT_BYTES, TAG_BYTES, Wrapped
from app.errors import ContentCorrupt, KeyUnavailable, NotFound, ObjectFailed
from app.storage.base import OBJECT_LOCKED, DeleteFailure, MultipartRef, ObjectStore, UploadedPart
from app.storage.codec import ORIGINAL, Fetch, Sealed, tail_role, variant_role

_LOCAL_CHUNK = 1024 * 1024  # bytes of a local object read at a time


@dataclass
class Removal:
    """What FileStore.remove did not remove: the files the store refused (with its code), and the versions a
    bucket's object lock keeps of sealed files (removed as far as anyone can read them: counted)."""

    refused: dict[uuid.UUID, str] = field(default_factory=dict)
    locked: dict[uuid.UUID, int] = field(default_factory=dict)


class KeyringPort(Protocol):
    """What the facade needs of the keyring (app/platform/keys.py): a new file's data key, and a stored one
    unwrapped."""

    def new_data_key(self, file_id: uuid.UUID) -> tuple[bytes, Wrapped]:
        """A fresh data key and its wrapping by the current key."""

    def unwrap(self, file_id: uuid.UUID, wrapped: Wrapped) -> bytes:
        """The data key of a file from its row (KeyUnavailable, or its KeyMismatch)."""


class _NoKeyring:
    def new_data_key(self, file_id: uuid.UUID) -> tuple[bytes, Wrapped]:
        raise KeyUnavailable("(none: no keyring)")

    def unwrap(self, file_id: uuid.UUID, wrapped: Wrapped) -> bytes:
        raise KeyUnavailable(wrapped.key_id)


class KeyedFile(Protocol):
    """What the facade reads of a file's row to find and open its bytes (app.db.files.FileRow is one)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def object_key(self) -> str | None: ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def encrypted(self) -> bool: ...

    @property
    def key_id(self) -> str | None: ...

    @property
    def wrapped_key(self) -> bytes | None: ...

    @property
    def piece_size(self) -> int | None: ...

    @property
    def store(self) -> str: ...


class FileStore:
    """A file's objects on an ObjectStore: their keys, their sealing under the file's own data key (when the file
    is encrypted), and their removal under the one rule.

    Args:
        store: the transport of the primary store (where new files go).
        keyring: the keys that wrap every file's data key (file.keyring).
        encrypt_new: seal the files created from now on (file.encryption); a file keeps what it was made with.
        named: the transport of a store by its name (file.stores): a file's objects are read from, written to and
            removed from the store its row names. None: every name is `store` (one store).
    """

    def __init__(
        self,
        store: ObjectStore,
        keyring: KeyringPort | None = None,
        encrypt_new: bool = False,
        named: Callable[[str], ObjectStore] | None = None,
    ):
        self.store = store
        self.keyring: KeyringPort = keyring or _NoKeyring()
        self.encrypt_new = encrypt_new
        self._named = named

    def in_store(self, name: str) -> ObjectStore:
        """The transport of the store of this name (StoreUnknown when it is not configured)."""
        return self.store if self._named is None else self._named(name)

    # -- a file's data key ---------------------------------------------------------------------------------

    def new_key(self, file_id: uuid.UUID) -> Wrapped | None:
        """A data key for a new file, wrapped by the current keyring key; None when new files are not sealed."""
        if not self.encrypt_new:
            return None
        return self.keyring.new_data_key(file_id)[1]

    def sealing(self, row: KeyedFile) -> Sealed | None:
        """How a file's bytes are sealed: None for a file stored in plaintext.

        Raises:
            NotFound: the file's key was destroyed (it ended): nothing of it can be read, ever.
            KeyUnavailable: the keyring lacks the key that wrapped it, or (KeyMismatch) its key of that id does
                not open it.
        """
        if not row.encrypted:
            return None
        if row.key_id is None or row.wrapped_key is None or not row.piece_size:
            raise NotFound()
        return Sealed(row.id, self.keyring.unwrap(row.id, Wrapped(row.key_id, row.wrapped_key)), row.piece_size)

    # -- reading a file's objects: the one way their bytes leave for a reader ------------------------------

    def read(
        self,
        row: KeyedFile,
        first: int = 0,
        length: int | None = None,
        variant: str | None = None,
        variant_size: int = 0,
    ) -> Chunks:
        """A file's original (or one variant of `variant_size` bytes) from plaintext byte `first`, `length` bytes
        (None: to its end); of a sealed file only the segments that hold them are read and opened. A missing object
        raises NotFound, and a first segment that does not open ContentCorrupt, at this call; a later segment
        that does not open raises ContentCorrupt while iterating (a response then ends short, never altered)."""
        key = self._key_of(row, variant)
        sealed = self.sealing(row)
        store = self.in_store(row.store)
        if sealed is None:
            return store.open(key, first, length)
        size, piece_size = (row.size_bytes, sealed.piece_size) if variant is None else (variant_size, None)
        role = ORIGINAL if variant is None else variant_role(variant)
        fetch, done = self._fetch(store, key)
        try:
            chunks = sealed.open(fetch, role, size, first, length, piece_size)
        except BaseException:
            done()
            raise
        return _Primed(chunks, done)

    def measure(self, row: KeyedFile) -> tuple[int, str]:
        """The plaintext size and hex sha256 of a file's original, read once, streamed (a sealed one proven whole:
        every segment opened, the last one final)."""
        key = self._key_of(row, None)
        sealed = self.sealing(row)
        store = self.in_store(row.store)
        digest = hashlib.sha256()
        size = 0
        done: Callable[[], None] = _nothing
        chunks: Iterator[bytes] = iter(())
        try:
            if sealed is None:
                chunks = store.open(key)
            else:
                fetch, done = self._fetch(store, key)
                chunks = sealed.open_whole(fetch, ORIGINAL, row.size_bytes, sealed.piece_size)
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
            done()
        return size, digest.hexdigest()

    @staticmethod
    def _fetch(store: ObjectStore, key: str) -> tuple[Fetch, Callable[[], None]]:
        """How a sealed object's stored bytes are read, and what to call when done: on a local disk the object is
        opened once and read where the segments lie (a piece's header and a range far inside it are two reads of
        one open file, not two walks of the directories); from a remote store, a ranged GET each."""
        local = store.open_file(key)
        if local is None:
            return (lambda at, count: store.open(key, at, count)), _nothing
        descriptor = local.fileno()

        def fetch(at: int, count: int) -> Iterator[bytes]:
            end = at + count
            while at < end:
                chunk = os.pread(descriptor, min(_LOCAL_CHUNK, end - at), at)
                if not chunk:
                    return  # shorter than sealed: the codec says so
                at += len(chunk)
                yield chunk

        return fetch, local.close

    def local_file(self, row: KeyedFile, variant: str | None = None) -> BinaryIO | None:
        """The whole object as a local file the server may send itself, or None (a remote store, or sealed bytes,
        which only the api opens)."""
        if row.encrypted:
            return None
        return self.in_store(row.store).open_file(self._key_of(row, variant))

    def presigned(
        self, row: KeyedFile, expires_in: timedelta, content_type: str, disposition: str, variant: str | None = None
    ) -> str | None:
        """A URL that reads the object directly from the store for `expires_in` (S3), or None for a sealed file:
        its bytes leave only opened, through the api."""
        store = self.in_store(row.store)
        if row.encrypted or not store.supports_direct:
            return None
        return store.presign_get(self._key_of(row, variant), expires_in, content_type, disposition)

    @staticmethod
    def _key_of(row: KeyedFile, variant: str | None) -> str:
        if variant is not None:
            return FileObjects(row.id).variant(variant)
        if row.object_key is None:
            raise NotFound()
        return row.object_key

    # -- writing a file's objects ----------------------------------------------------------------------------

    def put_part(self, row: KeyedFile, ref: MultipartRef, number: int, data: bytes | Iterator[bytes]) -> UploadedPart:
        """Store part `number` of a file's upload, sealed as one piece of its original when the file is sealed."""
        sealed = self.sealing(row)
        if sealed is not None:
            data = sealed.seal(ORIGINAL, number, [data] if isinstance(data, bytes) else data)
        return self.in_store(row.store).put_part(ref, number, data)

    def complete(self, row: KeyedFile, ref: MultipartRef, parts: Sequence[UploadedPart]) -> tuple[int, str | None]:
        """Assemble the parts into the original; returns its plaintext size and sha256 (None when neither the
        driver nor a read gave it here: a plaintext original on S3 is measured by the caller)."""
        sealed = self.sealing(row)  # a key the keyring cannot open stops the completion before it assembles
        assembled = self.in_store(row.store).complete_upload(ref, parts)
        if sealed is None:
            return assembled.size_bytes, assembled.sha256
        return self.measure(row)  # the driver saw sealed bytes: their size and digest are not the file's

    def head(self, row: KeyedFile, length: int) -> bytes:
        """The first `length` bytes of a file's original (of a sealed one only its first segment is opened).

        Raises:
            NotFound: the object is gone. StorageError: the store does not answer. ContentCorrupt: it does not
                open.
        """
        chunks = self.read(row, 0, min(length, row.size_bytes))
        try:
            return b"".join(chunks)[:length]
        finally:
            chunks.close()

    def read_tail(self, row: KeyedFile, number: int) -> bytes:
        """The bytes of a tus upload's tail (b"" when it is missing, or when its sealed bytes do not open: the
        upload then resumes from its last whole part)."""
        tail_key = FileObjects(row.id).tail_key
        try:
            data = self.in_store(row.store).get(tail_key)
        except NotFound:
            return b""
        sealed = self.sealing(row)
        if sealed is None:
            return data
        try:
            return b"".join(
                sealed.open(
                    lambda at, count: iter([data[at : at + count]]), tail_role(number), _piece_plain_size(len(data))
                )
            )
        except (ContentCorrupt, ValueError):
            return b""

    def write_tail(self, row: KeyedFile, number: int, data: bytes) -> None:
        """Write a tus upload's tail: the bytes received past its last whole part, which begin part `number`."""
        sealed = self.sealing(row)
        stored = data if sealed is None else sealed.seal_bytes(tail_role(number), 1, data)
        self.in_store(row.store).put(FileObjects(row.id).tail_key, stored, len(stored))

    def write_original(self, row: KeyedFile, data: bytes) -> str:
        """Write the next revision of a file's original (`orig-(r+1)`, which its purge already covers), sealed in
        pieces of the file's piece size when the file is sealed; returns its key for the row to reference."""
        key = FileObjects(row.id, row.object_key).next_original
        sealed = self.sealing(row)
        if sealed is None:
            stored = data
        else:
            piece = row.piece_size or len(data) or 1
            stored = b"".join(
                sealed.seal_bytes(ORIGINAL, number, data[at : at + piece])
                for number, at in enumerate(range(0, max(len(data), 1), piece), start=1)
            )
        self.in_store(row.store).put(key, stored, len(stored))
        return key

    def write_variant(self, row: KeyedFile, name: str, data: bytes, content_type: str) -> None:
        """Write one variant of a file under the key schema's name for it (atomic, overwrites), sealed as one
        piece when the file is sealed."""
        sealed = self.sealing(row)
        stored = data if sealed is None else sealed.seal_bytes(variant_role(name), 1, data)
        self.in_store(row.store).put(
            FileObjects(row.id).variant(name),
            stored,
            len(stored),
            content_type if sealed is None else "application/octet-stream",
        )

    # -- which keys a file owns, and their removal --------------------------------------------------------

    def keys_of(self, objects: FileObjects, with_tail: bool | None = None) -> list[str]:
        """Every key of the file's own objects and of its upload's parts where the driver stores them as
        objects (fs), whatever its session's state: a part that landed after a completion goes with its
        file."""
        return objects.object_keys(with_tail) + self.in_store(objects.store).part_keys(
            str(objects.file_id), objects.part_count
        )

    def count_keys(self, objects: FileObjects) -> int:
        """How many keys keys_of names (for receipts and metrics), without building them."""
        return (
            objects.revision
            + 1
            + len(VARIANTS)
            + (1 if objects.tail else 0)
            + len(self.in_store(objects.store).part_keys(str(objects.file_id), objects.part_count))
        )

    def remove(self, clearance: Clearance, files: Sequence[FileObjects]) -> Removal:
        """Remove everything of the freed files: their objects in batch deletes, then the multipart upload of
        each whose session did not complete. A missing object is removed. A version a bucket's object lock keeps
        counts as removed for a sealed file (its data key went with the clearance: nothing opens it) and is
        counted; for a file in plaintext it is a refusal like any other.

        Returns:
            The files the store refused (one key or one upload), with the store's code, and the locked versions
            of sealed files: the others went.

        Raises:
            StorageError: the store as a whole failed; nothing is known of the keys not yet answered.
        """
        chosen = [objects for objects in files if objects.file_id in clearance]
        failed: dict[uuid.UUID, list[str]] = {}
        for store in sorted({objects.store for objects in chosen}):
            owner = {key: objects for objects in chosen if objects.store == store for key in self.keys_of(objects)}
            for failure in self.in_store(store).delete_many(owner):
                failed.setdefault(owner[failure.key].file_id, []).append(failure.code or "refused")
        result = Removal()
        sealed = {objects.file_id for objects in chosen if objects.sealed}
        for file_id, codes in failed.items():
            if file_id in sealed and all(code == OBJECT_LOCKED for code in codes):
                result.locked[file_id] = len(codes)
            else:
                result.refused[file_id] = next((code for code in codes if code != OBJECT_LOCKED), codes[0])
        for objects in chosen:
            if objects.parts_open and objects.upload_id and objects.file_id not in result.refused:
                try:
                    self.in_store(objects.store).abort_upload(self._ref(objects, objects.upload_id), objects.part_count)
                except ObjectFailed as exc:
                    result.refused[objects.file_id] = exc.store_code or "refused"
        return result

    def remove_keys(
        self, clearance: Clearance, keys: Mapping[uuid.UUID, Iterable[str]], store: str | None = None
    ) -> list[DeleteFailure]:
        """Remove these keys of the freed files (strays past a completion, what a read of the store found
        left) from the store of this name (None: the primary); a key that is not its file's is refused as a
        DeleteFailure, never deleted (K3)."""
        doomed: list[str] = []
        wrong: list[DeleteFailure] = []
        for file_id, file_keys in keys.items():
            if file_id not in clearance:
                continue
            for key in file_keys:
                (doomed.append(key) if owner_of(key) == file_id else wrong.append(DeleteFailure(key, "not_its_key")))
        target = self.store if store is None else self.in_store(store)
        return wrong + (target.delete_many(doomed) if doomed else [])

    def abort_uploads(
        self, clearance: Clearance, uploads: Mapping[uuid.UUID, Sequence[MultipartRef]], store: str | None = None
    ) -> int:
        """Abort these multipart uploads of the freed files (a repeated abort, or one the store still lists) in
        the store of this name (None: the primary); returns how many were aborted. Raises ObjectFailed when the
        store refused one."""
        target = self.store if store is None else self.in_store(store)
        aborted = 0
        for file_id, refs in uploads.items():
            if file_id not in clearance:
                continue
            for ref in refs:
                if owner_of(ref.key) != file_id or ref.file_id != str(file_id):
                    raise ObjectFailed("an upload that is not the file's own", store_code="not_its_key")
                target.abort_upload(ref, 0)
                aborted += 1
        return aborted

    def remove_unmanaged(self, keys: Sequence[str], store: str | None = None) -> list[DeleteFailure]:
        """Remove keys of a prefix other software writes (D16's sweeps) from the store of this name (None: the
        primary): never a key of the file schema."""
        target = self.store if store is None else self.in_store(store)
        return [DeleteFailure(key, "file_key") for key in keys if owner_of(key) is not None] + target.delete_many(
            [key for key in keys if owner_of(key) is None]
        )

    @staticmethod
    def _ref(objects: FileObjects, upload_id: str | None) -> MultipartRef:
        return MultipartRef(file_id=str(objects.file_id), key=objects.object_key or "", upload_id=upload_id)


def _nothing() -> None:
    pass


class Chunks(Protocol):
    """A reader's bytes: iterate them, and close them when done (early or not)."""

    def __iter__(self) -> Iterator[bytes]: ...

    def __next__(self) -> bytes: ...

    def close(self) -> None: ...


class _Primed:
    """Chunks with the first one read at once: a missing object, or a first segment that does not open, raises
    when the read is asked for rather than after a response began. Closing (or reaching the end, or an error)
    closes the chunks and runs `done` (the object's release), whether the chunks were iterated or not."""

    def __init__(self, chunks: Iterator[bytes], done: Callable[[], None]):
        self._chunks, self._done = chunks, done
        try:
            self._first: bytes | None = next(chunks, None)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> _Primed:
        return self

    def __next__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        try:
            return next(self._chunks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        done, self._done = self._done, _nothing
        try:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            done()


def _piece_plain_size(stored: int) -> int:
    """The plaintext bytes of one sealed piece `stored` bytes long (a tail, whose row may count fewer)."""
    body = stored - HEADER_BYTES
    if body < TAG_BYTES:
        raise ValueError("shorter than an empty piece")
    segments = -(-body // SEALED_SEGMENT_BYTES)
    return body - TAG_BYTES * segments
