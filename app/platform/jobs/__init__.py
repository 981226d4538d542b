"""The jobs services commit with their changes (D9). Services name actors here; workers/actors.py binds
the names to functions. Arguments carry ids only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol
from uuid import UUID


class JobSink(Protocol):
    """Where a job is committed: a unit of work writes it to the outbox in its transaction."""

    def enqueue(self, queue_name: str, actor_name: str, *args: Any) -> Any:
        """Commit a job with the transaction's change."""


PURGE_QUEUE, PURGE_ACTOR = "maintenance", "purge_objects"
SCAN_QUEUE, SCAN_ACTOR = "scan", "scan_file"
CLEANUP_QUEUE, CLEANUP_ACTOR = "maintenance", "cleanup_pending"
RETENTION_QUEUE, RETENTION_ACTOR = "maintenance", "retention_run"
SWEEP_QUEUE, SWEEP_ACTOR = "maintenance", "sweep_prefix"
ERASE_QUEUE, ERASE_ACTOR = "maintenance", "erase_subject"
# A migration between stores has a queue of its own: copying a store's objects never holds back a purge.
STORES_QUEUE, STORES_ACTOR = "stores", "migrate_stores"
# Image variants have a queue of their own: decoding images never holds back a purge or a scan.
VARIANTS_QUEUE, VARIANTS_ACTOR = "variants", "make_variants"
# Webhook deliveries have a queue of their own: a receiver that times out never holds back a purge.
WEBHOOK_QUEUE, WEBHOOK_ACTOR = "webhooks", "deliver_webhooks"


def enqueue_purge(uow: JobSink, *file_ids: UUID | Iterable[UUID]) -> None:
    """Commit one purge job for these files with the unit of work (one message carries many ids)."""
    ids: list[str] = []
    for item in file_ids:
        if isinstance(item, (UUID, str)):
            ids.append(str(item))
        else:
            ids.extend(str(file_id) for file_id in item)
    if ids:
        uow.enqueue(PURGE_QUEUE, PURGE_ACTOR, ids)


def enqueue_scan(uow: JobSink, file_id: UUID) -> None:
    uow.enqueue(SCAN_QUEUE, SCAN_ACTOR, str(file_id))


def enqueue_variants(uow: JobSink, file_id: UUID) -> None:
    """Commit the job that makes a file's image variants."""
    uow.enqueue(VARIANTS_QUEUE, VARIANTS_ACTOR, str(file_id))
