"""Step d, catch-up of lost purges: deleted rows first (oldest mark), then live rows whose refused objects are due
again (D7), then live rows that are final and not deliverable whose objects no purge removed yet (a lost job,
D19). The purge runs inline, with no new job, so an outage piles up no jobs; a store-wide error ends the step,
a refused file is skipped. A file a legal hold covers is left out: its release sends it to the purge."""

from __future__ import annotations

import uuid

from app.db import cleanup as sql
from app.lifecycle.batches import CandidateStep, Outcome
from app.lifecycle.purge import purge_files
from app.lifecycle.steps.base import Run

KEPT = ("kept_attached", "kept_slot", "kept_live", "row_refused", "bad_key", "held")


def step(run: Run) -> CandidateStep:
    """Three pages, each by (time, id); every candidate is purged, the purge deciding."""

    def purge(ids: list[uuid.UUID]) -> Outcome:
        purged = purge_files(run.rt, ids)
        return Outcome(
            acted=purged.results["row"] + purged.results["objects"],
            kept=sum(purged.results[why] for why in KEPT),
            failed=purged.results["refused"],
        )

    return CandidateStep(
        "d",
        "catch_up",
        [
            lambda conn, cursor, limit: sql.deleted_rows(conn, run.now, cursor, limit),
            lambda conn, cursor, limit: sql.due_refused_live(conn, run.now, cursor, limit),
            lambda conn, cursor, limit: sql.objects_due_live(conn, cursor, limit),
        ],
        lambda conn, ids: list(ids),
        purge,
    )
