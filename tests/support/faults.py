"""Fault injection the standards allow: a store call that pauses where a test says, and S3 refusing keys."""

from __future__ import annotations

import threading

from app.errors import StorageError


class PausingStore:
    """Wraps a store; the first call of `method` stops after the real call until release(), so a test can
    act while that call is in progress. Everything else passes through."""

    def __init__(self, store, method: str):
        self._store, self._method = store, method
        self.driver = store.driver
        self.entered = threading.Event()
        self._release = threading.Event()
        self._taken = threading.Lock()
        self._first = True

    def release(self) -> None:
        self._release.set()

    def __getattr__(self, name):
        attribute = getattr(self._store, name)
        if name != self._method:
            return attribute

        def paused(*args, **kwargs):
            result = attribute(*args, **kwargs)
            with self._taken:
                first, self._first = self._first, False
            if first:
                self.entered.set()
                assert self._release.wait(30), "the test never released the paused call"
            return result

        return paused


class RefusingS3:
    """Fault injection on the minio client of an S3Store: DeleteObjects answers `code` (AccessDenied by
    default) for the named keys, per key, as S3 does, and deletes the rest. heal() ends the fault."""

    def __init__(self, s3_store, refused: set[str], code: str = "AccessDenied"):
        from minio.deleteobjects import DeleteError, DeleteResult

        self.client = s3_store.client
        self.refused = refused
        original = self.client._delete_objects

        def delete_objects(bucket, objects, quiet=False, bypass_governance_mode=False):
            kept = [o for o in objects if o.name not in self.refused]
            result = original(bucket, kept, quiet=quiet) if kept else DeleteResult([], [])
            errors = [DeleteError(code, "refused", o.name, o.version_id) for o in objects if o.name in self.refused]
            return DeleteResult(result.object_list, result.error_list + errors)

        self.client._delete_objects = delete_objects

    def heal(self) -> None:
        del self.client._delete_objects


class Failing:
    """Wraps a store; the named call fails with a store-wide error `times` times (always when None), as an
    outage would; every other call passes through. `failed` tells whether it failed at least once."""

    def __init__(self, store, method, times: int | None = None):
        self._store, self._method, self._left = store, method, times
        self.driver = store.driver
        self.failed = False

    def __getattr__(self, name):
        attribute = getattr(self._store, name)
        if name != self._method:
            return attribute

        def failing(*args, **kwargs):
            if self._left is None or self._left > 0:
                if self._left is not None:
                    self._left -= 1
                self.failed = True
                raise StorageError("injected outage")
            return attribute(*args, **kwargs)

        return failing


def FailOnce(store, method):
    """The named call fails once (a transient outage), then passes through."""
    return Failing(store, method, times=1)


def Down(store, method):
    """The named call always fails (the store is down for it)."""
    return Failing(store, method)


class Interleaved:
    """Wraps a store; around the `call`-th call of `method` (before it, or after it returned: `when`), runs
    `action()` once, in the caller's thread: a forced interleaving of a user's request with a store call that
    is in flight (no lock is held then: K1). Everything else passes through."""

    def __init__(self, store, method: str, action, when: str = "after", call: int = 1):
        self._store, self._method, self._action, self._when = store, method, action, when
        self.driver = store.driver
        self._left = call
        self.ran = False

    def __getattr__(self, name):
        attribute = getattr(self._store, name)
        if name != self._method:
            return attribute

        def interleaved(*args, **kwargs):
            self._left -= 1
            due = self._left == 0
            if due and self._when == "before":
                self.ran = True
                self._action()
            result = attribute(*args, **kwargs)
            if due and self._when == "after":
                self.ran = True
                self._action()
            return result

        return interleaved
