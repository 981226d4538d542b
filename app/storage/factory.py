"""Build the configured ObjectStore (never chosen at import time: STYLE.md)."""

from __future__ import annotations

from app.platform.config import Config
from app.db.context import in_transaction
from app.storage.base import ObjectStore
from app.storage.fs import FsStore
from app.storage.guard import GuardedStore
from app.storage.s3 import S3Store


def build_store(cfg: Config) -> GuardedStore:
    """The driver named by `file.storage.driver`, wrapped in the K1 guard."""
    store: ObjectStore
    if cfg.file.storage.driver == "s3":
        s3 = cfg.file.s3
        store = S3Store(s3.endpoint, s3.bucket, s3.access_key, s3.secret_key, region=s3.region,
                        secure=s3.secure, create_bucket=s3.create_bucket, pool_size=cfg.database.pool_size + 6,
                        timeout=s3.timeout.total_seconds())
    else:
        store = FsStore(cfg.file.fs.root, min_free_bytes=cfg.file.fs.min_free_bytes)
    return GuardedStore(store, in_transaction)
