"""What every cleanup step shares: the run it belongs to (the runtime, the policy, the time read once, D8) and
the two shapes a step takes (app/lifecycle/batches.py): over candidates, or once."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.lifecycle.batches import CandidateStep, Outcome, StepReport, isolated

if TYPE_CHECKING:
    from app.platform.config import Config
    from app.runtime import Runtime


@dataclass(frozen=True)
class CleanupPolicy:
    """The limits the cleanup works by, built once from the configuration."""

    batch_size: int
    unattached_ttl: timedelta
    failed_row_ttl: timedelta
    tmp_ttl: timedelta
    object_delete_delay: timedelta
    receipt_ttl: timedelta
    scan_pending_ttl: timedelta
    message_tombstone_ttl: timedelta
    direct_abort_delay: timedelta = timedelta(minutes=1)
    webhook_lost_after: timedelta = timedelta(minutes=15)
    webhook_ttl: timedelta = timedelta(days=7)
    variants_pending_ttl: timedelta = timedelta(hours=1)
    variants: bool = True

    @classmethod
    def from_config(cls, cfg: Config) -> CleanupPolicy:
        """The policy of the configured keys."""
        return cls(
            batch_size=cfg.file.gc_batch_size,
            unattached_ttl=cfg.file.unattached_ttl,
            failed_row_ttl=cfg.file.failed_row_ttl,
            tmp_ttl=cfg.file.upload_session_ttl,
            object_delete_delay=cfg.privacy.object_delete_delay,
            receipt_ttl=cfg.privacy.receipt_ttl,
            scan_pending_ttl=cfg.scan.pending_ttl,
            message_tombstone_ttl=cfg.privacy.message_tombstone_ttl,
            direct_abort_delay=cfg.file.direct_abort_delay,
            webhook_lost_after=cfg.file.gc_interval,
            webhook_ttl=cfg.webhooks.delivery_ttl,
            variants_pending_ttl=cfg.image.pending_ttl,
            variants=cfg.image.variants,
        )


@dataclass(frozen=True)
class WholeStep:
    """A step without candidates, run once: `run(report, dry_run)`."""

    letter: str
    name: str
    run: Callable[[StepReport, bool], None]


Step = CandidateStep | WholeStep


@dataclass(frozen=True)
class Run:
    """One cleanup run: what its steps read, and the helpers they share."""

    rt: Runtime
    policy: CleanupPolicy
    now: datetime

    def in_unit_of_work(
        self, letter: str, work: Callable[[UnitOfWork, list[uuid.UUID]], int]
    ) -> Callable[[list[uuid.UUID]], Outcome]:
        """`act` for a step that changes rows: a batch per unit of work, a failing candidate isolated."""
        return isolated(self.rt.db, f"cleanup.{letter}", work, event="cleanup.candidate_failed", step=letter)

    def delete_in_batches(
        self,
        report: StepReport,
        dry_run: bool,
        name: str,
        count: Callable[[Conn], int],
        delete: Callable[[Conn, int], int],
    ) -> None:
        """Rows past a cutoff go in batches of file.gc_batch_size, one unit of work each, until a batch comes
        back smaller (STYLE.md); the dry run counts them."""
        if dry_run:
            counted = self.rt.db.read(count)
            report.candidates += counted
            report.acted += counted
            return
        while True:
            removed = self.rt.db.unit_of_work(lambda uow: delete(uow.conn, self.policy.batch_size), name=name)
            report.candidates += removed
            report.acted += removed
            report.batches += 1
            if removed < self.policy.batch_size:
                return
