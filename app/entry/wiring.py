"""The composition root: every collaborator of a process, wired from the configuration. It sits above every
wing it wires (entry), so that the wings never import each other to be put together."""

from __future__ import annotations

import sys
from typing import cast

from app.db.context import in_transaction
from app.db.pool import Database, Timeouts
from app.db.publisher import Outbox
from app.domain.image_metadata import Mode
from app.domain.policies import ContentPolicy, LifecyclePolicy
from app.domain.quotas import Limit
from app.domain.uploads import UploadLimits
from app.domain.variants import Sizes
from app.lifecycle import ends
from app.lifecycle.deletion import mark_deleted
from app.lifecycle.journal import JournalWriter
from app.platform import tracing
from app.platform.clock import Clock, SystemClock
from app.platform.config import Config
from app.platform.config.tree import StoreSettings
from app.platform.keys import Keyring
from app.runtime import BrokerPort, Runtime
from app.storage.base import Driver, ObjectStore
from app.storage.fs import FsStore
from app.storage.guard import GuardedStore


def build_store(cfg: Config, name: str = "") -> GuardedStore:
    """The store of this name (empty: the primary, file.store.primary), wrapped in the K1 guard: `default` is the
    driver named by `file.storage.driver` with `file.s3.*` or `file.fs.*`; the others are declared in
    `file.stores`."""
    name = name or cfg.file.store.primary
    declared = {settings.name: settings for settings in cfg.file.stores}
    if name == "default":
        settings = StoreSettings("default", cfg.file.storage.driver, cfg.file.s3, cfg.file.fs)
    else:
        settings = declared[name]
    store: Driver
    if settings.driver == "s3" and settings.s3 is not None:
        # imported here: minio and urllib3 cost each command and role on fs a tenth of a second of CPU at start
        from app.storage.s3 import S3Store

        _count_s3_throttles()
        s3 = settings.s3
        store = S3Store(
            s3.endpoint,
            s3.bucket,
            s3.access_key,
            s3.secret_key,
            region=s3.region,
            secure=s3.secure,
            create_bucket=s3.create_bucket,
            pool_size=cfg.database.pool_size + 6,
            timeout=s3.timeout.total_seconds(),
            public_endpoint=s3.public_endpoint,
        )
    elif settings.fs is not None:
        store = FsStore(settings.fs.root, min_free_bytes=settings.fs.min_free_bytes)
    else:  # pragma: no cover - parse_stores gives every store its driver's settings
        raise ValueError("a store without settings")
    # With tracing on, each call is a span (its operation, the store's name, counts; never a key).
    return cast(GuardedStore, tracing.traced_store(GuardedStore(store, in_transaction), name))


def build_others(cfg: Config) -> dict[str, ObjectStore]:
    """Every configured store but the primary, by name (default among them when another is the primary)."""
    names = {"default"} | {settings.name for settings in cfg.file.stores}
    return {name: build_store(cfg, name) for name in sorted(names - {cfg.file.store.primary})}


def database_timeouts(cfg: Config) -> Timeouts:
    d = cfg.database
    return Timeouts(
        pool=d.pool_timeout.total_seconds(),
        connect=d.connect_timeout.total_seconds(),
        statement=d.statement_timeout.total_seconds(),
        maintenance=d.maintenance_statement_timeout.total_seconds(),
        keepalive=d.keepalive.total_seconds(),
        pooled=d.pooler == "transaction",
    )


def _count_throttled(operation: str) -> None:
    from app.platform.observability import metrics

    metrics.STORE_THROTTLED.labels(operation).inc()


def _count_s3_throttles() -> None:
    """The S3 driver's throttled calls, in this process's metrics, once its module is loaded (an S3 store was made
    here or given)."""
    if "app.storage.s3" in sys.modules:
        from app.storage import s3 as s3_driver

        s3_driver.count_throttled = _count_throttled


def build_runtime(
    cfg: Config,
    broker: BrokerPort,
    role: str,
    clock: Clock | None = None,
    store: ObjectStore | None = None,
    background_publish: bool = False,
    others: dict[str, ObjectStore] | None = None,
    journal_writes: str = "background",
) -> Runtime:
    """Wire the database (with the subscribers of a file's end), the store, the broker and the outbox for one
    process.

    background_publish: publish committed jobs from a thread of the process (the api and the worker: a
    request never waits for RabbitMQ, D9); off, the committing thread publishes (tests, one-shot commands).
    journal_writes: `background`: the journal entries a commit made are written right after it by a thread of the
    process, and what is left when it closes (every role and command); `manual`: only when asked (tests that
    step through the journal themselves).
    """
    clock = clock or SystemClock()
    tracing.setup("dev" if role == "all" else role)  # before the pool: its connections are instrumented
    _count_s3_throttles()  # the store may be given (a test's S3 store)
    db = Database(
        cfg.database.url,
        pool_size=cfg.database.pool_size,
        tx_retry_max=cfg.database.tx_retry_max,
        clock=clock,
        timeouts=database_timeouts(cfg),
        subscribers=ends.standard(cfg),
    )
    outbox = Outbox(db, broker, background=background_publish, linger_s=cfg.outbox.publish_linger.total_seconds())
    db.after_commit = outbox.publish_committed
    limits = UploadLimits(
        part_size=cfg.file.part_size,
        max_size=cfg.file.max_size,
        max_attachments=cfg.file.max_attachments,
        session_ttl=cfg.file.upload_session_ttl,
        complete_timeout=cfg.file.complete_timeout,
        write_timeout=cfg.file.write_timeout,
        write_wait=cfg.file.write_wait,
        direct_url_ttl=cfg.file.direct_url_ttl,
        sealed=cfg.file.encryption,
        scan_max_size=cfg.scan.max_size if cfg.scan.clamd_address else None,
        quota=Limit(cfg.quotas.default_bytes, cfg.quotas.default_files),
    )
    image = cfg.image
    content = ContentPolicy(
        clamd_address=cfg.scan.clamd_address,
        scan_timeout=cfg.scan.timeout,
        variants=image.variants,
        sizes=Sizes(image.thumb_small, image.thumb_large, image.preview),
        image_max_size=image.max_size,
        image_max_pixels=image.max_pixels,
        image_timeout=image.timeout,
        strip_metadata=cast(Mode, image.strip_metadata),
        strip_original=image.strip_original,
        link_secret=cfg.file.link_secret,
        link_ttl=cfg.file.link_ttl,
    )
    lifecycle = LifecyclePolicy(
        batch_size=cfg.file.gc_batch_size,
        object_delete_delay=cfg.privacy.object_delete_delay,
        receipt_ttl=cfg.privacy.receipt_ttl,
        purge_retry_base=cfg.file.purge_retry_base,
        case_ref_pattern=cfg.holds.case_ref_pattern,
        sweep_concurrency=cfg.storage.sweep_concurrency,
        console_session_ttl=cfg.api.console_session_ttl,
        dev_fast=cfg.schedule.dev_fast,
        webhook_timeout=cfg.webhooks.timeout,
        webhook_retries=cfg.webhooks.retry_schedule,
    )
    runtime = Runtime(
        cfg=cfg,
        clock=clock,
        db=db,
        store=store or build_store(cfg),
        others=build_others(cfg) if others is None else others,
        broker=broker,
        outbox=outbox,
        role=role,
        limits=limits,
        content=content,
        lifecycle=lifecycle,
        delete_files=mark_deleted,
        keyring=Keyring(cfg.file.keyring),
    )
    writer = JournalWriter(
        runtime,
        background=journal_writes == "background",
        linger_s=cfg.journal.write_linger.total_seconds(),
        interval_s=cfg.journal.write_interval.total_seconds(),
    )
    runtime.journal = writer
    db.on_journal = writer.committed
    db.checkout_hooks.append(runtime.schema)  # before the restore guard: a database not this release's is refused
    return runtime
