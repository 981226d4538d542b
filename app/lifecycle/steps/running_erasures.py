"""Step i, running erasures whose jobs ran out of retries (D16): a round of each, so that no erasure stays
running for ever."""

from __future__ import annotations

from app.db import erasures as erasures_sql
from app.lifecycle.batches import StepReport
from app.lifecycle.erasure import erase_round
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run; an erasure another runner is in is left to it (D19)."""

    def rounds(report: StepReport, dry_run: bool) -> None:
        running = run.rt.db.read(erasures_sql.running_ids)
        report.candidates = len(running)
        if dry_run:
            return
        for erasure_id in running:
            if erase_round(run.rt, erasure_id) != "running":
                report.acted += 1

    return WholeStep("i", "running_erasures", rounds)
