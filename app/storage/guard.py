"""D4 K1: no object store call runs inside a database transaction.

GuardedStore wraps a driver and raises StoreCallInTransaction when a store call is made while the calling
thread has a unit of work open. The factory applies it everywhere, so a violation fails loudly in tests and
in production alike rather than holding row locks across a slow network call.
"""

from __future__ import annotations

from typing import Any, Callable

from app.errors import StoreCallInTransaction

_GUARDED = {"put", "open", "get", "head", "delete", "delete_many", "begin_upload", "put_part",
            "complete_upload", "abort_upload", "check", "describe", "sweep_tmp"}


class GuardedStore:
    def __init__(self, store: Any, in_transaction: Callable[[], bool]):
        self._store = store
        self._in_transaction = in_transaction
        self.driver = store.driver

    @property
    def inner(self) -> Any:
        return self._store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name not in _GUARDED:
            return attribute

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self._in_transaction():
                raise StoreCallInTransaction(f"object store call {name} inside a unit of work (D4 K1)")
            return attribute(*args, **kwargs)

        return guarded
