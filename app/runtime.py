"""The collaborators of one process, built once from the configuration and passed to services.

Services take what they need from here as arguments; they never look anything up themselves (STYLE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.clock import Clock, SystemClock
from app.config import Config
from app.db.core import Database
from app.outbox import Outbox
from app.storage.factory import build_store


@dataclass
class Runtime:
    cfg: Config
    clock: Clock
    db: Database
    store: Any  # ObjectStore, wrapped in the K1 guard
    broker: Any  # dramatiq.Broker
    outbox: Outbox
    role: str

    def close(self) -> None:
        self.db.close()


def build_runtime(cfg: Config, broker: Any, role: str, clock: Clock | None = None, store: Any = None) -> Runtime:
    """Wire the database, the store, the broker and the outbox for one process."""
    db = Database(cfg.database.url, pool_size=cfg.database.pool_size, tx_retry_max=cfg.database.tx_retry_max)
    outbox = Outbox(db, broker)
    db.after_commit = outbox.publish_committed
    return Runtime(cfg=cfg, clock=clock or SystemClock(), db=db, store=store or build_store(cfg),
                   broker=broker, outbox=outbox, role=role)
