"""The collaborators of one process, built once from the configuration (app/entry/wiring.py) and passed to
services.

It stands between the wings: above `db`, `storage` and `platform`, whose parts it holds, and below `content`
and `lifecycle`, which take it. None of the wings it holds imports it.

Each member is typed by its port: the store by `ObjectStore` (the K1 guard implements it), the broker by
`BrokerPort` (what the outbox needs of dramatiq's broker), the clock by `Clock`. Services take what they
need from here as arguments; they never look anything up themselves (STYLE.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, cast

from app.db.migrate import SchemaGuard
from app.db.pool import Database
from app.db.publisher import Outbox
from app.db.uow import UnitOfWork
from app.domain.policies import ContentPolicy, LifecyclePolicy
from app.domain.uploads import UploadLimits
from app.platform.clock import Clock
from app.platform.config import Config
from app.platform.keys import Keyring
from app.storage.base import ObjectStore, StoreMaintenance
from app.storage.files import FileStore

# The one deletion of files (lifecycle.deletion.mark_deleted), wired in by the composition root: a slot deletes
# the file it no longer keeps through it, and `content` never imports `lifecycle`. (uow, file ids, now, via) ->
# the ids marked.
DeleteFiles = Callable[[UnitOfWork, Sequence[uuid.UUID], datetime, str], list[uuid.UUID]]


class BrokerPort(Protocol):
    """What Lethe needs of a message broker: publish a message, and close. dramatiq's brokers and the tests'
    RecordingBroker both are one."""

    def enqueue(self, message: Any, *, delay: int | None = None) -> Any:
        """Publish a message (with publisher confirms on RabbitMQ); raise when it was not taken."""

    def close(self) -> None:
        """Release connections."""


class JournalPort(Protocol):
    """The process's journal writer (app/lifecycle/journal.py): it takes the entries each commit journaled, writes
    them to the journal right after (or, in tests, when asked), and writes what it still holds at close."""

    def committed(self, entries: Sequence[Any]) -> None:
        """Entries a unit of work committed (called after its commit; never raises, never waits)."""

    def flush_now(self) -> int:
        """Write every waiting entry now, in this thread; returns how many."""

    def close(self, timeout: float = 5.0) -> None:
        """Write what is left (the last flush of a stopping process) and stop."""


class _NoJournalWriter:
    def committed(self, entries: Sequence[Any]) -> None:
        pass

    def flush_now(self) -> int:
        return 0

    def close(self, timeout: float = 5.0) -> None:
        pass


@dataclass
class Runtime:
    cfg: Config
    clock: Clock
    db: Database
    store: ObjectStore
    broker: BrokerPort
    outbox: Outbox
    role: str
    limits: UploadLimits
    content: ContentPolicy  # the values the content services work by (scan, images, serving)
    lifecycle: LifecyclePolicy  # and the lifecycle services (removals, holds, erasures, sweeps, the console)
    delete_files: DeleteFiles
    keyring: Keyring
    journal: JournalPort = field(default_factory=_NoJournalWriter)
    # The stores besides the primary (`store`), by name (file.stores, and default when it is not the primary).
    others: dict[str, ObjectStore] = field(default_factory=dict)
    # The database's migrations against this release's, checked on the first connection (app/db/migrate.py).
    schema: SchemaGuard = field(default_factory=SchemaGuard)

    @property
    def maintenance(self) -> StoreMaintenance:
        """The same store through its maintenance port (sweeps, audit, erasure, cleanup e). The store is built
        (build_store) or handed in as a GuardedStore, which implements both ports."""
        return cast(StoreMaintenance, self.store)

    @property
    def primary(self) -> str:
        """The name of the store new files go to (file.store.primary): `store`."""
        return self.cfg.file.store.primary

    @property
    def store_names(self) -> list[str]:
        """Every configured store's name, the primary first."""
        return [self.primary, *sorted(set(self.others) - {self.primary})]

    def store_named(self, name: str) -> ObjectStore:
        """The store of this name (the primary is `store`, whatever was swapped in).

        Raises:
            StoreUnknown: no store of this name is configured (a file's row names a store file.stores lost).
        """
        if name == self.primary:
            return self.store
        try:
            return self.others[name]
        except KeyError:
            from app.errors import StoreUnknown

            raise StoreUnknown(name) from None

    def maintenance_of(self, name: str) -> StoreMaintenance:
        """The store of this name through its maintenance port (the audit and the sweeps run on every store)."""
        return cast(StoreMaintenance, self.store_named(name))

    @property
    def files(self) -> FileStore:
        """A file's objects on their store: sealed under the file's own key when it is encrypted, and removed under
        the one rule for bytes (the only way to remove anything of a file). Made afresh from `store`, so that a
        store swapped in (a test's fault) is used; a file's row names its store."""
        return FileStore(self.store, self.keyring, self.cfg.file.encryption, named=self.store_named)

    def close(self) -> None:
        """Write what the journal writer holds, publish what the outbox holds, close the pool."""
        self.journal.close()
        self.outbox.close()
        self.db.close()
