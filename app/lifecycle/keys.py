# Rotation changes only how a data key is wrapped, never the data key: a file's sealed bytes are not touched, a
# download or an upload running beside it keeps the key it unwrapped, and a file whose key was destroyed
# meanwhile stays without one (the update writes only where a key still exists). Each batch locks its rows in id
# order (D10) and skips the ones another transaction holds: they are met again in the next pass.
"""The keyring against the database: which key ids live files need, files per key id, and rotation (every live
data key wrapped again by the current keyring key), in batches, resumable, several runners at once."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.db import file_keys as file_keys_sql
from app.db.file_keys import WrappedRow
from app.db.uow import UnitOfWork
from app.domain.sealing import Wrapped
from app.errors import KeyMismatch, KeyUnavailable, WrappedKeyCorrupt
from app.platform.keys import Keyring
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.keys")
PASSES = 5  # passes over the rows of a key, each meeting again what another transaction held in the one before


def missing_key_ids(key_ids_in_use: list[str], keyring: Keyring) -> list[str]:
    """The key ids live files need that the keyring does not hold (a key removed too early)."""
    return [key_id for key_id in key_ids_in_use if key_id not in keyring]


def opens_any(keyring: Keyring, rows: list[WrappedRow]) -> bool:
    """Whether the keyring opens any of these data keys (a few of one key id: one altered row does not make a
    good key look wrong; a wrong key opens none)."""
    for row in rows:
        try:
            keyring.unwrap(row.id, Wrapped(row.key_id, row.wrapped_key))
            return True
        except KeyUnavailable:
            continue
    return not rows


@dataclass(frozen=True)
class KeyStatus:
    """Files per key id (the current key first, then the others, then ids the keyring lacks), with the rows
    sealed without a key any more and those in plaintext."""

    current: str | None
    by_key_id: dict[str, int]
    missing: list[str]
    destroyed: int
    plaintext: int

    def as_dict(self) -> dict[str, object]:
        return {
            "current": self.current,
            "files_by_key_id": self.by_key_id,
            "missing_key_ids": self.missing,
            "sealed_without_key": self.destroyed,
            "plaintext": self.plaintext,
        }


def status(rt: Runtime) -> KeyStatus:
    """What `lethe keys status` prints."""
    counts = rt.db.read(file_keys_sql.counts)
    ring = rt.keyring
    ordered = {key_id: counts.by_key_id.get(key_id, 0) for key_id in ring.ids}
    ordered.update({key_id: files for key_id, files in counts.by_key_id.items() if key_id not in ordered})
    return KeyStatus(
        current=ring.current.id if ring.current else None,
        by_key_id=ordered,
        missing=missing_key_ids(list(counts.by_key_id), ring),
        destroyed=counts.destroyed,
        plaintext=counts.plaintext,
    )


@dataclass
class RotationReport:
    """What one rotation did: data keys wrapped again, and what it left (held by another transaction through
    every pass, or wrapped by a key the keyring lacks, or not opening), by key id."""

    current: str | None = None
    rewrapped: int = 0
    left: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    unusable: int = 0
    duration_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "current": self.current,
            "rewrapped": self.rewrapped,
            "left_by_key_id": self.left,
            "missing_key_ids": self.missing,
            "unusable": self.unusable,
            "duration_s": round(self.duration_s, 3),
        }


def rotate(
    rt: Runtime, batch_size: int = 1000, dry_run: bool = False, on_batch: Callable[[int], None] | None = None
) -> RotationReport:
    """Wrap every live data key again by the current keyring key, `batch_size` files a transaction. Run it again
    to resume: it takes up whatever is not under the current key yet.

    Raises:
        KeyUnavailable: the keyring is empty.
    """
    started = time.monotonic()
    ring = rt.keyring
    if ring.current is None:
        raise KeyUnavailable("(none: the keyring is empty)")
    current = ring.current.id
    report = RotationReport(current=current)
    for key_id in rt.db.read(file_keys_sql.key_ids_in_use):
        if key_id == current:
            continue
        if key_id not in ring:
            report.missing.append(key_id)
            report.left[key_id] = rt.db.read(lambda conn: file_keys_sql.count_wrapped_by(conn, key_id))
            continue
        if dry_run:
            report.left[key_id] = rt.db.read(lambda conn: file_keys_sql.count_wrapped_by(conn, key_id))
            continue
        unusable: set[uuid.UUID] = set()
        for _ in range(PASSES):
            after = uuid.UUID(int=0)
            while True:
                seen, done, bad = rt.db.unit_of_work(
                    lambda uow: _rewrap_batch(uow, ring, key_id, after, batch_size), name="keys.rotate"
                )
                report.rewrapped += done
                unusable.update(bad)
                if on_batch is not None and done:
                    on_batch(done)
                if len(seen) < batch_size:  # SKIP LOCKED counts only the rows it answers: this pass is through
                    break
                after = seen[-1]
            left = rt.db.read(lambda conn: file_keys_sql.count_wrapped_by(conn, key_id))
            if left <= len(unusable):
                break
        report.unusable += len(unusable)
        if left:
            report.left[key_id] = left
    report.duration_s = time.monotonic() - started
    log_event(
        log,
        "info",
        "keys.rotated",
        "data keys wrapped again by the current keyring key",
        key_id=current,
        rewrapped=report.rewrapped,
        left=sum(report.left.values()),
        missing_key_ids=report.missing,
        unusable=report.unusable,
        duration_s=round(report.duration_s, 3),
    )
    return report


def _rewrap_batch(
    uow: UnitOfWork, ring: Keyring, key_id: str, after: uuid.UUID, batch_size: int
) -> tuple[list[uuid.UUID], int, list[uuid.UUID]]:
    """One batch: lock the next rows of `key_id` after `after`, wrap their data keys again. Returns (the ids
    seen, how many were wrapped again, the ids whose wrapped key does not open: left as they are)."""
    rows = file_keys_sql.lock_wrapped_by(uow.conn, key_id, after, batch_size)
    rewrapped: list[WrappedRow] = []
    unusable: list[uuid.UUID] = []
    for row in rows:
        try:
            again = ring.rewrap(row.id, Wrapped(row.key_id, row.wrapped_key))
        except (KeyMismatch, WrappedKeyCorrupt):
            unusable.append(row.id)  # altered, or copied from another row: left as it is, and counted
            continue
        rewrapped.append(WrappedRow(row.id, again.key_id, again.wrapped))
    changed = file_keys_sql.set_wrapped(uow.conn, rewrapped)
    if changed:
        uow.after_commit(lambda: metrics.KEYS_REWRAPPED.inc(changed))
    return [row.id for row in rows], changed, unusable
