"""The one way the lifecycle wing works through candidates (cleanup, retention): a step pages candidates
by (time, id) in batches until a batch comes back smaller than the batch size (STYLE.md), decides read-only
(so a dry run cannot drift from the real path) and acts in one unit of work per batch, isolating a failing
candidate in a savepoint of its own so that it never undoes the others."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from app.db.keyset import Candidate, Cursor
from app.db.pool import Database
from app.db.uow import UnitOfWork
from app.domain.redaction import RedactionError
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.lifecycle")

# What one candidate can cause: a constraint its row breaks, a stored event of its file without a redaction rule
# (D6). Anything else (StoreCallInTransaction, a ProgrammingError: bugs) fails the run loudly, and an outage
# (OperationalError) ends the step.
CANDIDATE_ERRORS = (psycopg.IntegrityError, RedactionError)


@dataclass
class StepReport:
    """What one step did (or, in a dry run, would do), as counts."""

    step: str
    name: str
    candidates: int = 0
    acted: int = 0
    kept: int = 0
    failed: int = 0
    batches: int = 0
    error: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class Outcome:
    acted: int = 0
    kept: int = 0
    failed: int = 0


Page = Callable[[psycopg.Connection, Cursor, int], list[Candidate]]


@dataclass(frozen=True)
class CandidateStep:
    """A step over candidates: page, decide (read-only), act (the real path)."""

    letter: str
    name: str
    pages: Sequence[Page]
    decide: Callable[[psycopg.Connection, list[uuid.UUID]], list[uuid.UUID]]
    act: Callable[[list[uuid.UUID]], Outcome]


def run_candidates(db: Database, step: CandidateStep, report: StepReport, batch_size: int, dry_run: bool) -> None:
    """The one runner of candidate steps: each page in batches by (time, id) until a batch comes back
    smaller than the batch size; the dry run calls decide alone."""
    for page in step.pages:
        cursor: Cursor = None
        while True:
            rows = db.read(lambda conn: page(conn, cursor, batch_size))
            if not rows:
                break
            report.batches += 1
            report.candidates += len(rows)
            ids = [row.id for row in rows]
            if dry_run:
                chosen = db.read(lambda conn: step.decide(conn, ids))
                outcome = Outcome(acted=len(chosen), kept=len(ids) - len(chosen))
            else:
                outcome = step.act(ids)
            report.acted += outcome.acted
            report.kept += outcome.kept
            report.failed += outcome.failed
            if len(rows) < batch_size:
                break
            cursor = (rows[-1].at, rows[-1].id)


def isolated(
    db: Database, name: str, work: Callable[[UnitOfWork, list[uuid.UUID]], int], event: str, **fields: Any
) -> Callable[[list[uuid.UUID]], Outcome]:
    """act for a step that changes rows: the batch in one savepoint; if it fails, once per candidate, each in
    a savepoint of its own, so that one failing candidate never undoes the others. A failing candidate is
    logged as `event` with its file id and the error's type only (D15)."""

    def act(ids: list[uuid.UUID]) -> Outcome:
        def batch(uow: UnitOfWork) -> tuple[int, int]:
            try:
                with uow.savepoint():
                    return work(uow, ids), 0
            except psycopg.OperationalError:
                raise
            except CANDIDATE_ERRORS:
                pass  # fall back to one candidate at a time
            acted = failed = 0
            for file_id in ids:
                try:
                    with uow.savepoint():
                        acted += work(uow, [file_id])
                except psycopg.OperationalError:
                    raise
                except CANDIDATE_ERRORS as exc:
                    failed += 1
                    log_event(
                        log,
                        "warning",
                        event,
                        "candidate failed",
                        file_id=str(file_id),
                        error=type(exc).__name__,
                        **fields,
                    )
            return acted, failed

        acted, failed = db.unit_of_work(batch, name=name)
        return Outcome(acted=acted, kept=len(ids) - acted - failed, failed=failed)

    return act
