"""Step n, webhook deliveries: pending deliveries due more than one cleanup interval ago and held by no attempt
are sent again (their job was lost; a receiver may see a message twice, with the same webhook-id); rows older
than webhooks.delivery_ttl go."""

from __future__ import annotations

from app.db import webhooks as webhooks_sql
from app.lifecycle import webhooks
from app.lifecycle.batches import StepReport
from app.lifecycle.steps.base import Run, WholeStep


def step(run: Run) -> WholeStep:
    """Once per run."""
    cutoff = run.now - run.policy.webhook_ttl

    def catch_up(report: StepReport, dry_run: bool) -> None:
        lost = webhooks.catch_up(run.rt, run.now, run.policy.webhook_lost_after, run.policy.batch_size, dry_run)
        report.candidates += lost
        report.acted += lost
        run.delete_in_batches(
            report,
            dry_run,
            "cleanup.n",
            lambda conn: webhooks_sql.count_prunable(conn, cutoff),
            lambda conn, limit: webhooks_sql.prune(conn, cutoff, limit),
        )

    return WholeStep("n", "webhooks", catch_up)
