# Webhooks tell the application when a file is truly gone. A message is written in the transaction of the
# event it reports (the purge's row removal, the erasure's completion, a hold's placement or release), with
# its delivery job in the outbox: a rolled-back purge sends nothing, and publishing never blocks a request or
# a purge (D9). The job posts outside every transaction, signed as Standard Webhooks 1.0 says, with the same
# id and bytes at every attempt; a timeout, a connection error or a 5xx is tried again on
# webhooks.retry_schedule; a 410 disables the endpoint until its configuration changes; another 4xx ends the
# message. An attempt leases its delivery (one attempt of it at a time, whoever sends it) and lasts at most
# webhooks.timeout end to end; each endpoint's deliveries travel in jobs of their own, on threads of their own
# (workers/pools.py), so a slow receiver delays neither another receiver nor a purge. Bodies carry ids, times
# and counts only, never a name, key, digest, uploader or subject (D15).
"""Deletion webhooks: record, deliver, list, redeliver, and the cleanup's pass."""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from opentelemetry.trace import SpanKind

from app.db import webhooks as sql
from app.db.uow import UnitOfWork
from app.domain.ends import FilesSettled
from app.domain.webhooks import FILE_PURGED, Endpoint, body_of, headers_of, message_id, next_attempt_at, outcome_of
from app.platform import tracing
from app.platform.jobs import WEBHOOK_ACTOR, WEBHOOK_QUEUE
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.platform.config.tree import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.webhooks")
JOB_IDS = 500  # deliveries per job
LEASE_MARGIN = timedelta(seconds=5)  # a lease outlives its attempt's webhooks.timeout by this much


def _subscribed(cfg: Config, event_type: str) -> list[str]:
    return [endpoint.name for endpoint in cfg.webhooks.endpoints if event_type in endpoint.events]


def wanted(cfg: Config, event_type: str) -> bool:
    """Whether any endpoint takes `event_type` (a caller skips building data nobody receives)."""
    return bool(_subscribed(cfg, event_type))


def _enqueue(uow: UnitOfWork, deliveries: Sequence[tuple[uuid.UUID, str]]) -> None:
    """Jobs for these deliveries, one endpoint per job: one endpoint's receiver never waits for another's."""
    by_endpoint: dict[str, list[uuid.UUID]] = {}
    for delivery_id, endpoint in deliveries:
        by_endpoint.setdefault(endpoint, []).append(delivery_id)
    for ids in by_endpoint.values():
        for start in range(0, len(ids), JOB_IDS):
            uow.enqueue(
                WEBHOOK_QUEUE, WEBHOOK_ACTOR, [str(delivery_id) for delivery_id in ids[start : start + JOB_IDS]]
            )


def record_event(uow: UnitOfWork, cfg: Config, event_type: str, data: Mapping[str, Any], occurred_at: datetime) -> None:
    """A message to every endpoint that takes `event_type`, sent after this unit of work commits."""
    endpoints = _subscribed(cfg, event_type)
    _enqueue(
        uow, sql.insert(uow.conn, [(name, event_type, dict(data), occurred_at) for name in endpoints], uow.clock.now())
    )


def record_files_settled(uow: UnitOfWork, cfg: Config, event: FilesSettled) -> None:
    """A lifecycle message (`file.ready`, `file.blocked`, `file.failed`, `file.variants_ready`) for each of these
    files and each endpoint that takes its type: the file's id, purpose and size, and the reason or the
    variants' names (never a name, key, digest or uploader)."""
    endpoints = _subscribed(cfg, event.event_type)
    if endpoints:
        _enqueue(uow, sql.insert_file_settled(uow.conn, endpoints, event, uow.clock.now()))


def record_file_purged(uow: UnitOfWork, cfg: Config, file_ids: Sequence[uuid.UUID], now: datetime) -> None:
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
    until = now + rt.lifecycle.webhook_timeout + LEASE_MARGIN
    rows = rt.db.unit_of_work(lambda uow: sql.lease_due(uow.conn, delivery_ids, now, until), name="webhooks.lease")
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


def _attempt(
    rt: Runtime,
    row: Any,
    endpoint: Endpoint | None,
    disabled: dict[str, str],
    down: dict[str, tuple[int | None, str | None]],
    now: datetime,
) -> str:
    def settle(state: str, attempts: int, status: int | None, error: str | None, at: datetime | None = None) -> None:
        rt.db.unit_of_work(
            lambda uow: sql.record(uow.conn, row.id, state, attempts, status, error, at, now), name="webhooks.record"
        )

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
        status, error = _attempt_post(rt, row, endpoint)
    attempts = row.attempts + 1
    outcome = outcome_of(status if error is None else None)
    if outcome == "delivered":
        settle("delivered", attempts, status, None)
    elif outcome == "final":
        settle("failed", attempts, status, "refused")
        log_event(
            log,
            "warning",
            "webhook.refused",
            "the receiver refused a webhook message; it is not sent again",
            delivery_id=str(row.id),
            endpoint=endpoint.name,
            event_type=row.event_type,
            status=status,
        )
    elif outcome == "disable":

        def gone(uow: UnitOfWork) -> None:
            sql.disable(uow.conn, endpoint.name, endpoint.fingerprint, now)
            sql.record(uow.conn, row.id, "disabled", attempts, status, "gone", None, now)

        rt.db.unit_of_work(gone, name="webhooks.disable")
        disabled[endpoint.name] = endpoint.fingerprint
        log_event(
            log,
            "warning",
            "webhook.endpoint_disabled",
            "a webhook endpoint answered 410 Gone; it is disabled until its configuration changes",
            endpoint=endpoint.name,
        )
        outcome = "disabled"
    else:
        down[endpoint.name] = (status, error)
        at = next_attempt_at(attempts, rt.lifecycle.webhook_retries, now)
        if at is None:
            settle("failed", attempts, status, error or "server_error")
            log_event(
                log,
                "warning",
                "webhook.failed",
                "a webhook message failed every attempt of webhooks.retry_schedule",
                delivery_id=str(row.id),
                endpoint=endpoint.name,
                event_type=row.event_type,
                attempts=attempts,
                status=status,
                error=error,
            )
            outcome = "failed"
        else:
            settle("pending", attempts, status, error or "server_error", at)
            log_event(
                log,
                "info",
                "webhook.retry",
                "a webhook attempt failed; it is tried again",
                delivery_id=str(row.id),
                endpoint=endpoint.name,
                attempts=attempts,
                status=status,
                error=error,
                retry_in_s=int((at - now).total_seconds()),
            )
    return _counted(endpoint.name, outcome)


def _counted(endpoint: str, outcome: str) -> str:
    metrics.WEBHOOK_DELIVERIES.labels(endpoint, outcome).inc()
    return outcome


def _attempt_post(rt: Runtime, row: Any, endpoint: Endpoint) -> tuple[int | None, str | None]:
    """One HTTP attempt: (status, None) for an answer, (None, error) for none. The webhook-timestamp is the wall
    clock (receivers check it against theirs); the body is the message's, byte for byte, at every attempt."""
    body = body_of(row.event_type, row.occurred_at, row.data)
    headers = headers_of(endpoint.secrets, message_id(row.id), int(time.time()), body)
    metrics.WEBHOOK_ATTEMPTS.labels(endpoint.name).inc()
    with tracing.span(
        "webhook.attempt",
        SpanKind.CLIENT,
        endpoint=endpoint.name,
        event_type=row.event_type,
        delivery_id=row.id,
        attempt=row.attempts + 1,
    ):
        status, error = post(
            endpoint.url,
            body,
            {**headers, "Content-Type": "application/json", "User-Agent": "lethe-webhooks"},
            rt.lifecycle.webhook_timeout.total_seconds(),
        )
        tracing.count(**{"http.response.status_code": status, "error": error})
    return status, error


def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> tuple[int | None, str | None]:
    """POST `body` and read the status line and headers of the answer, within `timeout_s` seconds end to end:
    a receiver that trickles its answer is cut off when the time is up (each read's own timeout would let it
    go on for ever). No redirect is followed (the URL is the operator's) and the answer's body is never read.
    The environment's HTTP(S)_PROXY and NO_PROXY apply, as they would for any HTTP client.

    Returns:
        (status, None) for an answer; (None, "timeout" | "connection" | "request_error") for none.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None, "request_error"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and urllib.request.proxy_bypass(parts.hostname):
        proxy = None
    conn: http.client.HTTPConnection
    if proxy:
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(
                via.hostname or "", via.port or 80, timeout=timeout_s, context=ssl.create_default_context()
            )
            conn.set_tunnel(parts.hostname, port)
        else:
            conn = http.client.HTTPConnection(via.hostname or "", via.port or 80, timeout=timeout_s)
            target = url
    elif parts.scheme == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, port, timeout=timeout_s, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, port, timeout=timeout_s)
    cut = threading.Event()

    def cut_off() -> None:
        cut.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # a blocked read returns at once
            except OSError:
                pass

    watchdog = threading.Timer(timeout_s, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("POST", target, body=body, headers=dict(headers))
        status = conn.getresponse().status
        return (None, "timeout") if cut.is_set() else (status, None)
    except TimeoutError:
        return None, "timeout"
    except (OSError, http.client.HTTPException):
        return None, "timeout" if cut.is_set() else "connection"
    except ValueError:
        return None, "request_error"
    finally:
        watchdog.cancel()
        conn.close()


def list_deliveries(rt: Runtime, failed_only: bool = False, limit: int = 100) -> list[Any]:
    """The latest deliveries, newest first (`lethe webhooks list`)."""
    return rt.db.read(lambda conn: sql.listed(conn, failed_only, limit))


def delivery(rt: Runtime, delivery_id: uuid.UUID) -> Any:
    """One delivery's row, or None."""
    return rt.db.read(lambda conn: sql.delivery(conn, delivery_id))


def redeliver(rt: Runtime, delivery_id: uuid.UUID) -> Any:
    """Send a delivery again now, with its id (so its webhook-id) and its bytes; None when unknown."""

    def work(uow: UnitOfWork) -> Any:
        row = sql.redeliver(uow.conn, delivery_id, rt.clock.now())
        if row is not None:
            _enqueue(uow, [(row.id, row.endpoint)])
        return row

    return rt.db.unit_of_work(work, name="webhooks.redeliver")


def catch_up(rt: Runtime, now: datetime, lost_after: timedelta, batch: int, dry_run: bool) -> int:
    """The cleanup's pass (step n): send again the pending deliveries due more than `lost_after` ago (their
    job was lost: at least once), and set the age gauge.

    Returns:
        How many deliveries were sent again (would be, in a dry run).
    """
    lost = rt.db.read(lambda conn: sql.overdue(conn, now - lost_after, now, batch))
    if dry_run:
        return len(lost)
    if lost:
        rt.db.unit_of_work(lambda uow: _enqueue(uow, lost), name="webhooks.catch_up")
    oldest = rt.db.read(sql.oldest_undelivered)
    metrics.webhook_backlog_gauge().set(max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
    return len(lost)
