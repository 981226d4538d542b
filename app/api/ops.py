"""Operations endpoints: /healthz (alive), /readyz (dependencies reachable), /metrics (D1, D15)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.problems import problem
from app.readiness import Readiness
from app.observability import metrics_registry
from workers.broker import check_broker
from app.logs import log_event

log = logging.getLogger("lethe.api")
blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz():
    return {"status": "ok"}


def readiness_for(runtime) -> Readiness:
    """The api's readiness checks: the database, the broker and the store, answered within 1.5 s (D13)."""
    return Readiness({"database": runtime.db.ping, "broker": lambda: check_broker(runtime.broker),
                      "store": runtime.store.check})


@blueprint.get("/readyz")
def readyz():
    readiness = current_app.extensions["lethe.readiness"]
    failed = readiness.failures()
    for name, error in failed.items():
        log_event(log, "warning", "api.not_ready", "dependency not ready", dependency=name, error=error)
    if failed:
        return problem(503, "not_ready", "Not ready", detail="unreachable: " + ", ".join(failed),
                       headers={"Retry-After": "5"})
    return {"status": "ready"}


@blueprint.get("/metrics")
def metrics():
    return Response(generate_latest(metrics_registry()), mimetype=CONTENT_TYPE_LATEST)
