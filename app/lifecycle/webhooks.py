# Webhooks tell the application when a file is truly gone. A message is written in the transaction of the
# event it reports (the purge's row removal, the erasure's completion, a hold's placement or release), with
# its delivery job in the outbox: a rolled-back purge sends nothing, and publishing never blocks a request or
# a purge (D9). The job posts outside every transaction, signed as Standard Webhooks 1.0 says, with the same
# id and bytes at every attempt; a timeout, a connection error or a 5xx is tried again on
# webhooks.retry_schedule; a 410 disables the endpoint until its configuration changes; another 4xx ends the
# message. Bodies carry ids, times and counts only, never a name, key, digest, uploader or subject (D15).
"""Deletion webhooks (issue 28): record, deliver, list, redeliver, and the cleanup's pass."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import requests

from app.db import webhooks as sql
from app.db.uow import UnitOfWork
from app.domain.webhooks import (FILE_PURGED, Endpoint, body_of, headers_of, message_id, next_attempt_at,
                                 outcome_of)
from app.platform.jobs import WEBHOOK_ACTOR, WEBHOOK_QUEUE
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (issue 22: typed at every service boundary)
    from app.platform.runtime import Runtime

log = logging.getLogger("lethe.webhooks")
JOB_IDS = 500  # deliveries per job


def _subscribed(cfg, event_type: str) -> list[str]:
    return [endpoint.name for endpoint in cfg.webhooks.endpoints if event_type in endpoint.events]


def wanted(cfg, event_type: str) -> bool:
    """Whether any endpoint takes `event_type` (a caller skips building data nobody receives)."""
    return bool(_subscribed(cfg, event_type))


def _enqueue(uow: UnitOfWork, ids: list[uuid.UUID]) -> None:
    for start in range(0, len(ids), JOB_IDS):
        uow.enqueue(WEBHOOK_QUEUE, WEBHOOK_ACTOR, [str(delivery_id) for delivery_id in ids[start:start + JOB_IDS]])


def record_event(uow: UnitOfWork, cfg, event_type: str, data: Mapping[str, Any], occurred_at: datetime) -> None:
    """A message to every endpoint that takes `event_type`, sent after this unit of work commits."""
    endpoints = _subscribed(cfg, event_type)
    _enqueue(uow, sql.insert(uow.conn, [(name, event_type, dict(data), occurred_at) for name in endpoints],
                             uow.clock.now()))


def record_file_purged(uow: UnitOfWork, cfg, file_ids: Sequence[uuid.UUID], now: datetime) -> None:
    """A `file.purged` message for each file whose row (and receipt) this unit of work removed (wrote)."""
    _enqueue(uow, sql.insert_file_purged(uow.conn, _subscribed(cfg, FILE_PURGED), file_ids, now))


@dataclass
class DeliveryReport:
    """Outcomes of one delivery run, by outcome (counts only)."""

    outcomes: dict[str, int] = field(default_factory=dict)
    next_in: timedelta | None = None


def deliver(rt: Runtime, delivery_ids: Sequence[uuid.UUID]) -> DeliveryReport:
    """Attempt every due pending delivery among these, outside any transaction, and record each outcome.

    Returns:
        The outcomes, and how long until the earliest of them is due again (None when every one ended): the
        actor retries its message after that delay.
    """
    endpoints = {endpoint.name: endpoint for endpoint in rt.cfg.webhooks.endpoints}
    now = rt.clock.now()
    rows = rt.db.read(lambda conn: sql.due(conn, delivery_ids, now))
    disabled = rt.db.read(sql.disabled) if rows else {}
    down: dict[str, tuple[int | None, str | None]] = {}  # endpoints that failed in this run: the others wait
    report = DeliveryReport()
    for row in rows:
        endpoint = endpoints.get(row.endpoint)
        outcome = _attempt(rt, row, endpoint, disabled, down, now)
        report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
    due = rt.db.read(lambda conn: sql.next_due(conn, delivery_ids))
    report.next_in = None if due is None else max(due - rt.clock.now(), timedelta(0))
    return report


def _attempt(rt: Runtime, row: Any, endpoint: Endpoint | None, disabled: dict[str, str],
             down: dict[str, tuple[int | None, str | None]], now: datetime) -> str:
    def settle(state: str, attempts: int, status: int | None, error: str | None, at: datetime | None = None) -> None:
        rt.db.unit_of_work(lambda uow: sql.record(uow.conn, row.id, state, attempts, status, error, at, now),
                           name="webhooks.record")

    if endpoint is None:
        settle("failed", row.attempts, row.last_status, "endpoint_removed")
        return _counted(row.endpoint, "failed")
    if endpoint.name in disabled:
        if disabled[endpoint.name] == endpoint.fingerprint:
            settle("disabled", row.attempts, row.last_status, "endpoint_disabled")
            return _counted(endpoint.name, "disabled")
        rt.db.unit_of_work(lambda uow: sql.enable(uow.conn, endpoint.name), name="webhooks.enable")
        del disabled[endpoint.name]  # its configuration changed since the 410: it is tried again
    if endpoint.name in down:
        status, error = down[endpoint.name]  # it failed a moment ago in this run: this one shares its fate
    else:
        status, error = _post(rt, row, endpoint)
    attempts = row.attempts + 1
    outcome = outcome_of(status if error is None else None)
    if outcome == "delivered":
        settle("delivered", attempts, status, None)
    elif outcome == "final":
        settle("failed", attempts, status, "refused")
        log_event(log, "warning", "webhook.refused", "the receiver refused a webhook message; it is not sent again",
                  delivery_id=str(row.id), endpoint=endpoint.name, event_type=row.event_type, status=status)
    elif outcome == "disable":
        def gone(uow: UnitOfWork) -> None:
            sql.disable(uow.conn, endpoint.name, endpoint.fingerprint, now)
            sql.record(uow.conn, row.id, "disabled", attempts, status, "gone", None, now)

        rt.db.unit_of_work(gone, name="webhooks.disable")
        disabled[endpoint.name] = endpoint.fingerprint
        log_event(log, "warning", "webhook.endpoint_disabled", "a webhook endpoint answered 410 Gone; it is disabled "
                  "until its configuration changes", endpoint=endpoint.name)
        outcome = "disabled"
    else:
        down[endpoint.name] = (status, error)
        at = next_attempt_at(attempts, rt.cfg.webhooks.retry_schedule, now)
        if at is None:
            settle("failed", attempts, status, error or "server_error")
            log_event(log, "warning", "webhook.failed", "a webhook message failed every attempt of "
                      "webhooks.retry_schedule", delivery_id=str(row.id), endpoint=endpoint.name,
                      event_type=row.event_type, attempts=attempts, status=status, error=error)
            outcome = "failed"
        else:
            settle("pending", attempts, status, error or "server_error", at)
            log_event(log, "info", "webhook.retry", "a webhook attempt failed; it is tried again",
                      delivery_id=str(row.id), endpoint=endpoint.name, attempts=attempts, status=status,
                      error=error, retry_in_s=int((at - now).total_seconds()))
    return _counted(endpoint.name, outcome)


def _counted(endpoint: str, outcome: str) -> str:
    metrics.WEBHOOK_DELIVERIES.labels(endpoint, outcome).inc()
    return outcome


def _post(rt: Runtime, row: Any, endpoint: Endpoint) -> tuple[int | None, str | None]:
    """One HTTP attempt: (status, None) for an answer, (None, error) for none. The webhook-timestamp is the wall
    clock (receivers check it against theirs); the body is the message's, byte for byte, at every attempt."""
    body = body_of(row.event_type, row.occurred_at, row.data)
    headers = headers_of(endpoint.secrets, message_id(row.id), int(time.time()), body)
    timeout = rt.cfg.webhooks.timeout.total_seconds()
    metrics.WEBHOOK_ATTEMPTS.labels(endpoint.name).inc()
    try:
        # No redirect is followed (the URL is the operator's), and the answer's body is never read.
        with requests.post(endpoint.url, data=body, headers=headers, timeout=(timeout, timeout),
                           allow_redirects=False, stream=True) as response:
            return response.status_code, None
    except requests.Timeout:
        return None, "timeout"
    except requests.ConnectionError:
        return None, "connection"
    except requests.RequestException:
        return None, "request_error"


def list_deliveries(rt: Runtime, failed_only: bool = False, limit: int = 100) -> list[Any]:
    """The latest deliveries, newest first (`lethe webhooks list`)."""
    return rt.db.read(lambda conn: sql.listed(conn, failed_only, limit))


def redeliver(rt: Runtime, delivery_id: uuid.UUID) -> Any:
    """Send a delivery again now, with its id (so its webhook-id) and its bytes; None when unknown."""
    def work(uow: UnitOfWork) -> Any:
        row = sql.redeliver(uow.conn, delivery_id, rt.clock.now())
        if row is not None:
            _enqueue(uow, [row.id])
        return row

    return rt.db.unit_of_work(work, name="webhooks.redeliver")


def catch_up(rt: Runtime, now: datetime, lost_after: timedelta, batch: int, dry_run: bool) -> int:
    """The cleanup's pass (step n): send again the pending deliveries due more than `lost_after` ago (their
    job was lost: at least once), and set the age gauge.

    Returns:
        How many deliveries were sent again (would be, in a dry run).
    """
    lost = rt.db.read(lambda conn: sql.overdue(conn, now - lost_after, batch))
    if dry_run:
        return len(lost)
    if lost:
        rt.db.unit_of_work(lambda uow: _enqueue(uow, lost), name="webhooks.catch_up")
    oldest = rt.db.read(sql.oldest_undelivered)
    metrics.webhook_backlog_gauge().set(max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
    return len(lost)
