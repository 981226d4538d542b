"""Operations endpoints: /healthz (alive), /readyz (dependencies reachable), /metrics (D1, D15)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.problems import problem
from app.observability import metrics_registry
from workers.broker import check_broker
from app.logs import log_event

log = logging.getLogger("lethe.api")
blueprint = Blueprint("ops", __name__)


@blueprint.get("/healthz")
def healthz():
    return {"status": "ok"}


@blueprint.get("/readyz")
def readyz():
    runtime = current_app.extensions["lethe"]
    checks = {"database": runtime.db.ping, "broker": lambda: check_broker(runtime.broker),
              "store": runtime.store.check}
    failed = []
    for name, check in checks.items():
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - readiness reports, it does not raise
            log_event(log, "warning", "api.not_ready", "dependency not ready", dependency=name,
                      error=type(exc).__name__)
            failed.append(name)
    if failed:
        return problem(503, "not_ready", "Not ready", detail="unreachable: " + ", ".join(failed))
    return {"status": "ready"}


@blueprint.get("/metrics")
def metrics():
    return Response(generate_latest(metrics_registry()), mimetype=CONTENT_TYPE_LATEST)
