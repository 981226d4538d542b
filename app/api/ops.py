"""Operations endpoints: /healthz (alive), /readyz (dependencies reachable), /metrics (D1, D15)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.problems import problem
from app.content import clamd
from app.domain.journal import GUARD_DETAIL
from app.platform.jobs.broker import check_broker
from app.platform.observability.logs import log_event
from app.platform.observability.registry import metrics_registry
from app.platform.readiness import Readiness

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.api")
blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


def readiness_for(runtime: Runtime) -> Readiness:
    """The api's readiness checks: the database, the broker and the store, answered within 1.5 s (D13); and
    the scanner when one is configured, which degrades the service but never makes it unready."""
    checks = {
        "database": runtime.db.ping,
        "broker": lambda: check_broker(runtime.broker),
        "store": runtime.store.check,
        # A database this release's migrations do not match is never ready (the first connection checks).
        "schema": lambda: None if runtime.schema.verified else runtime.db.read(lambda conn: None),
    }
    address = runtime.cfg.scan.clamd_address
    if address:
        checks["scanner"] = lambda: clamd.ping(address, 1.0)
    return Readiness(checks, soft=frozenset({"scanner"}))


@blueprint.get("/readyz")
def readyz() -> Response | dict[str, Any]:
    """The dependencies answer (D13); a scanner outage degrades only."""
    readiness = current_app.extensions["lethe.readiness"]
    failed = readiness.failures()
    degraded = sorted(name for name in failed if name in readiness.soft)
    for name, error in failed.items():
        event = "api.degraded" if name in readiness.soft else "api.not_ready"
        log_event(log, "warning", event, "dependency not ready", dependency=name, error=error)
    hard = [name for name in failed if name not in readiness.soft]
    refused = current_app.extensions["lethe.schema"].refused
    if "schema" in failed and refused is not None:
        return problem(
            503,
            "not_ready",
            "Not ready",
            reason="schema_too_new" if refused.unknown else "schema_not_migrated",
            detail=refused.problem(),
            headers={"Retry-After": "30"},
        )
    waiting = current_app.extensions["lethe.guard"].reason()
    if waiting is not None and not hard:
        return problem(
            503, "not_ready", "Not ready", reason=waiting, detail=GUARD_DETAIL[waiting], headers={"Retry-After": "10"}
        )
    if hard:
        return problem(
            503, "not_ready", "Not ready", detail="unreachable: " + ", ".join(hard), headers={"Retry-After": "5"}
        )
    # A scanner outage: ready (uploads and downloads of scanned files work), scans wait and are retried.
    return {"status": "ready", "degraded": degraded} if degraded else {"status": "ready"}


@blueprint.get("/metrics")
def metrics() -> Response:
    """Prometheus metrics of this process (aggregated over forked processes)."""
    # content_type, not mimetype: werkzeug would add a second charset to the one CONTENT_TYPE_LATEST carries.
    return Response(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)


@blueprint.get("/")
def root() -> dict[str, str]:
    """Where to go from the root: the interactive docs, the contract, health (no token needed, nothing else)."""
    return {
        "service": "lethe",
        "docs": "/docs",
        "openapi": "/openapi.json",
        "health": "/healthz",
        "ready": "/readyz",
        "api": "/api/v1",
    }
