# The file system driver deletes data. It resolves every key one directory at a time with O_NOFOLLOW, so a
# symbolic link placed anywhere under the root is never followed out of it (D4); a missing object counts as
# deleted; it removes directories that a delete emptied; and it never lists the key space, except its own
# `.tmp` in sweep_tmp and, for D16's sweeps and audit, list_prefix (D4 K2).
"""Local file system ObjectStore (the default driver)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import BinaryIO

from app.domain.keys import KeySchemaError, validate_key
from app.errors import InvalidKey, NotFound, ObjectFailed, StorageError
from app.storage.base import (
    DeleteFailure,
    ListedObject,
    ObjectInfo,
    raise_on_failures,
)

TMP_DIR = ".tmp"
CHUNK = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _segments(key: str) -> list[str]:
    try:
        validate_key(key)
    except KeySchemaError as exc:
        raise InvalidKey(str(exc)) from None
    segments = key.split("/")
    if segments[0] == TMP_DIR:
        raise InvalidKey("the driver's temporary directory is not a key")
    return segments


class _Dirs:
    """Open directory descriptors from the root down to a key's parent; closes them all on exit."""

    def __init__(self, root_fd: int):
        self.fds = [root_fd]
        self.names: list[str] = []
        self.touched: list[bool] = []  # per open directory below the root: did a delete unlink in it?

    @property
    def parent(self) -> int:
        return self.fds[-1]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class FsStore:
    """A store driver on a local directory: the Driver's operations, local files (sendfile) and a scratch
    area (`.tmp`, empty directories); an upload's parts are objects of their own (app/storage/defaults.py).

    Args:
        root: the directory that holds every object; created when missing.
        min_free_bytes: the free-space floor (`file.fs.min_free_bytes`): below it the root counts as full,
            check() fails (readiness) and put() refuses with a StorageError (503 storage_unavailable) before
            it writes, so that a full disk answers honestly instead of half-way through a file.
    """

    driver = "fs"

    def __init__(self, root: str, min_free_bytes: int = 0):
        os.makedirs(root, exist_ok=True)
        self.root = os.path.realpath(root)
        self.min_free_bytes = min_free_bytes
        try:
            os.makedirs(os.path.join(self.root, TMP_DIR), exist_ok=True)
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            # A read-only root still starts: reads and deletes of what is there answer, readiness says no.

    def free_bytes(self) -> int:
        try:
            st = os.statvfs(self.root)
        except OSError as exc:
            raise _os_error("read the free space", exc) from None
        return st.f_bavail * st.f_frsize

    def _ensure_room(self) -> None:
        if self.min_free_bytes and self.free_bytes() < self.min_free_bytes:
            raise StorageError("the fs root is below file.fs.min_free_bytes (ENOSPC)")

    # -- descriptor walking ---------------------------------------------------------------------------------

    def _open_root(self) -> _Dirs:
        try:
            return _Dirs(os.open(self.root, _DIR_FLAGS))
        except OSError as exc:
            raise StorageError(f"cannot open the fs root ({_errno_name(exc)})") from None

    def _enter(self, dirs: _Dirs, names: Sequence[str], create: bool) -> bool:
        """Open directories below dirs.parent one at a time, never following a link: the one walk of this
        driver. Returns False when one is missing and create is False.

        Raises:
            ObjectFailed: a component is a link, not a directory, or refused; StorageError: store-wide.
        """
        for name in names:
            while True:
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=dirs.parent)
                    break
                except FileNotFoundError:
                    if not create:
                        return False
                    try:
                        os.mkdir(name, 0o750, dir_fd=dirs.parent)
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise _os_error("create a directory", exc) from None
                except OSError as exc:
                    raise _os_error("open a directory", exc) from None
            dirs.fds.append(fd)
            dirs.names.append(name)
            dirs.touched.append(False)
        return True

    @contextmanager
    def _walk(self, segments: Sequence[str], create: bool) -> Iterator[_Dirs | None]:
        """Open the parent directories of a key from the root. Yields None when one is missing and create
        is False."""
        dirs = self._open_root()
        try:
            yield dirs if self._enter(dirs, segments, create) else None
        finally:
            dirs.close()

    # -- objects --------------------------------------------------------------------------------------------

    def _write_tmp(self, data: BinaryIO | bytes | Iterable[bytes]) -> tuple[str, int]:
        self._ensure_room()
        tmp_dir = os.path.join(self.root, TMP_DIR)
        try:
            os.makedirs(tmp_dir, exist_ok=True)
            fd, tmp_path = _mkstemp(tmp_dir)
        except OSError as exc:
            raise _os_error("write an object", exc) from None
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                if isinstance(data, (bytes, bytearray, memoryview)):
                    out.write(data)
                    size = len(data)
                elif hasattr(data, "read"):
                    while chunk := data.read(CHUNK):
                        out.write(chunk)
                        size += len(chunk)
                else:
                    for chunk in data:
                        out.write(chunk)
                        size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            _unlink_quietly(tmp_path)  # nothing half-written stays
            raise _os_error("write an object", exc) from None
        except BaseException:
            _unlink_quietly(tmp_path)
            raise
        return tmp_path, size

    def _publish(self, tmp_path: str, segments: list[str]) -> None:
        """Rename a finished temporary file into place, atomically."""
        try:
            tmp_dir_fd = os.open(os.path.join(self.root, TMP_DIR), _DIR_FLAGS)
        except OSError as exc:
            _unlink_quietly(tmp_path)
            raise _os_error("publish an object", exc) from None
        try:
            for attempt in range(3):
                with self._walk(segments[:-1], create=True) as dirs:
                    assert dirs is not None  # create=True makes every directory on the way
                    try:
                        os.rename(
                            os.path.basename(tmp_path), segments[-1], src_dir_fd=tmp_dir_fd, dst_dir_fd=dirs.parent
                        )
                        return
                    except FileNotFoundError:
                        # A concurrent delete pruned the directory we opened; open it again.
                        if attempt == 2:
                            raise StorageError("the target directory kept disappearing") from None
                    except IsADirectoryError:
                        raise StorageError("a directory stands at the object's key") from None
                    except OSError as exc:
                        raise _os_error("publish an object", exc) from None
        except BaseException:
            _unlink_quietly(tmp_path)
            raise
        finally:
            os.close(tmp_dir_fd)

    def put(
        self,
        key: str,
        data: BinaryIO | bytes | Iterable[bytes],
        length: int | None = None,
        content_type: str = "application/octet-stream",
    ) -> None:
        segments = _segments(key)
        tmp_path, size = self._write_tmp(data)
        if length is not None and size != length:
            _unlink_quietly(tmp_path)
            raise StorageError("the stream ended before its declared length")
        self._publish(tmp_path, segments)

    def _open_fd(self, key: str) -> int:
        segments = _segments(key)
        with self._walk(segments[:-1], create=False) as dirs:
            if dirs is None:
                raise NotFound("object not found")
            try:
                return os.open(segments[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirs.parent)
            except FileNotFoundError:
                raise NotFound("object not found") from None
            except OSError as exc:
                raise _os_error("open an object", exc) from None

    def open(self, key: str, first: int = 0, length: int | None = None) -> Generator[bytes, None, None]:
        fd = self._open_fd(key)

        def chunks() -> Generator[bytes, None, None]:
            with os.fdopen(fd, "rb") as handle:
                if first:
                    handle.seek(first)
                left = length
                while left is None or left > 0:
                    chunk = handle.read(CHUNK if left is None else min(CHUNK, left))
                    if not chunk:
                        return
                    if left is not None:
                        left -= len(chunk)
                    yield chunk

        return chunks()

    def open_file(self, key: str) -> BinaryIO | None:
        return os.fdopen(self._open_fd(key), "rb")

    def get(self, key: str) -> bytes:
        with os.fdopen(self._open_fd(key), "rb") as handle:
            return handle.read()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            fd = self._open_fd(key)
        except NotFound:
            return None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(size_bytes=st.st_size)

    def delete(self, key: str) -> None:
        raise_on_failures(self.delete_many([key]))

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        """Delete keys in one walk of the tree: keys are grouped by directory and visited in sorted order,
        so each directory is opened once (without following a link), its names unlinked, and it is pruned
        when the walk leaves it emptied. Every key is validated before anything is deleted. A directory or
        object refused (a link, not a directory, no permission) fails its keys only; a store-wide error
        (read-only, I/O error) raises."""
        by_parent: dict[tuple[str, ...], list[str]] = {}
        for key in keys:
            segments = _segments(key)
            by_parent.setdefault(tuple(segments[:-1]), []).append(segments[-1])
        if not by_parent:
            return []
        failures: list[DeleteFailure] = []
        dirs = self._open_root()
        try:
            for parent in sorted(by_parent):
                common = 0
                while common < min(len(dirs.names), len(parent)) and dirs.names[common] == parent[common]:
                    common += 1
                self._leave(dirs, common)
                try:
                    if not self._enter(dirs, parent[common:], create=False):
                        continue  # a directory on the way is gone, and so are its objects
                except ObjectFailed as exc:
                    failures += [DeleteFailure("/".join((*parent, name)), exc.store_code) for name in by_parent[parent]]
                    continue
                for name in by_parent[parent]:
                    try:
                        os.unlink(name, dir_fd=dirs.parent)  # unlink never follows a link
                    except FileNotFoundError:
                        pass
                    except OSError as exc:
                        error = _os_error("delete an object", exc)
                        if not isinstance(error, ObjectFailed):
                            raise error from None
                        failures.append(DeleteFailure("/".join((*parent, name)), error.store_code))
                if dirs.touched:
                    dirs.touched[-1] = True
            self._leave(dirs, 0)
        finally:
            dirs.close()
        return failures

    @staticmethod
    def _leave(dirs: _Dirs, depth: int) -> None:
        """Close directories deeper than depth, removing each one whose objects were deleted and that is now
        empty (a file's own directory). The fan-out directories `f/<aa>/<bb>` are kept: they are bounded
        (at most 65,536) and shared by many files, and removing them would cost a call per delete."""
        while len(dirs.names) > depth:
            os.close(dirs.fds.pop())
            name = dirs.names.pop()
            if dirs.touched.pop():
                try:
                    os.rmdir(name, dir_fd=dirs.parent)
                except OSError:
                    pass  # not empty: other objects live there

    # -- operations -----------------------------------------------------------------------------------------

    def check(self) -> None:
        """Ready when a file can be created in the root's temporary area and the free space is above the
        floor (D13: readiness says what a write would meet)."""
        self._ensure_room()
        try:
            fd, probe = _mkstemp(os.path.join(self.root, TMP_DIR))
        except OSError as exc:
            raise _os_error("write in the fs root", exc) from None
        os.close(fd)
        _unlink_quietly(probe)

    def describe(self) -> dict[str, str]:
        return {"driver": self.driver, "versioning": "off", "object_lock": "off"}

    def sweep_tmp(self, older_than: datetime, dry_run: bool = False) -> int:
        """Remove `.tmp` entries last modified before `older_than`; with dry_run only count them. A link is
        removed as an entry, never followed; an entry gone meanwhile (a put renamed it into place) is passed
        over. Nothing else under the root is looked at (K2)."""
        try:
            return self._sweep_tmp(older_than.timestamp(), dry_run)
        except OSError as exc:
            raise _os_error("sweep the temporary area", exc) from None

    def _sweep_tmp(self, cutoff: float, dry_run: bool) -> int:
        removed = 0
        tmp_dir = os.path.join(self.root, TMP_DIR)
        with os.scandir(tmp_dir) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if st.st_mtime >= cutoff:
                    continue
                removed += 1
                if dry_run:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)  # rmtree does not follow links (Linux)
                else:
                    _unlink_quietly(entry.path)
        return removed

    def _prefix_dirs(self, prefix: str, create: bool = False) -> contextlib.AbstractContextManager[_Dirs | None]:
        segments = _segments(prefix.rstrip("/"))
        return self._walk(segments, create=create)

    def list_prefix(self, prefix: str, after: str = "") -> Iterator[ListedObject]:
        """Depth first, names sorted in each directory (for `f/` that is ascending key order: its directory
        names have fixed lengths). A link is listed as an object and never entered; nothing outside the
        prefix is opened."""
        with self._prefix_dirs(prefix) as dirs:
            if dirs is None:
                return
            for listed in self._list_dir(dirs.parent, prefix):
                if listed.key > after:
                    yield listed

    def _list_dir(self, fd: int, base: str) -> Iterator[ListedObject]:
        try:
            with os.scandir(fd) as scan:
                entries = sorted((entry.name, entry.is_dir(follow_symlinks=False)) for entry in scan)
        except OSError as exc:
            raise _os_error("list a directory", exc) from None
        for name, is_dir in entries:
            if is_dir:
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue  # gone meanwhile
                except OSError as exc:
                    raise _os_error("open a directory", exc) from None
                try:
                    yield from self._list_dir(child, f"{base}{name}/")
                finally:
                    os.close(child)
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield ListedObject(key=base + name, modified_at=datetime.fromtimestamp(st.st_mtime, tz=UTC))

    def prune_dirs(self, prefix: str) -> int:
        """Deepest first. The prefix's own directory stays, and is made again if the deletes emptied and
        removed it (the other program writes into it)."""
        with self._prefix_dirs(prefix, create=True) as dirs:
            assert dirs is not None
            return self._prune(dirs.parent)

    def _prune(self, fd: int) -> int:
        removed = 0
        with os.scandir(fd) as scan:
            names = [entry.name for entry in scan if entry.is_dir(follow_symlinks=False)]
        for name in names:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                removed += self._prune(child)
            finally:
                os.close(child)
            try:
                os.rmdir(name, dir_fd=fd)
                removed += 1
            except OSError:
                pass  # not empty, or gone
        return removed


# errnos that say the file system as a whole is unwell: every other object would fail the same way.
_STORE_WIDE_ERRNOS = frozenset(
    {
        errno.EROFS,
        errno.EIO,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.ENODEV,
        errno.ESTALE,
        errno.ENXIO,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
    }
)


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def _os_error(action: str, exc: OSError) -> StorageError:
    """The one errno mapping of this driver: the errno name only (an OSError's text holds the path).
    A link or a non-directory in the way, or a refusal, is ObjectFailed; the rest is store-wide."""
    name = _errno_name(exc)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return ObjectFailed(f"cannot {action}: a path component is a symbolic link or not a directory", name)
    if exc.errno in _STORE_WIDE_ERRNOS:
        return StorageError(f"cannot {action} ({name})")
    return ObjectFailed(f"cannot {action} ({name})", name)


def _mkstemp(directory: str) -> tuple[int, str]:
    return tempfile.mkstemp(dir=directory, prefix="put-")


def _unlink_quietly(path: str) -> None:
    """Remove a temporary file; when even that fails (a root gone read-only), the tmp sweep takes it later."""
    try:
        os.unlink(path)
    except OSError:
        pass
