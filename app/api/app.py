"""The Flask application factory (D1, D13): flask-smorest with OpenAPI at /openapi.json and docs at /docs."""

from __future__ import annotations

import time

from flask import Flask, request
from flask_smorest import Api
from werkzeug.exceptions import HTTPException

from app import metrics
from app.api import ops, problems
from app.errors import LetheError


class LetheApi(Api):
    """flask-smorest's Api with every HTTP error answered as problem+json."""

    def handle_http_exception(self, error: HTTPException):
        return problems.from_http_exception(error)


def create_app(runtime) -> Flask:
    """Build the api for a Runtime (its database, store, broker, clock and configuration)."""
    app = Flask("lethe")
    app.config.update(
        API_TITLE="Lethe",
        API_VERSION="v1",
        OPENAPI_VERSION="3.1.0",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="/docs",
        OPENAPI_SWAGGER_UI_URL="https://cdn.jsdelivr.net/npm/swagger-ui-dist/",
        MAX_CONTENT_LENGTH=None,
        JSON_SORT_KEYS=False,
    )
    app.extensions["lethe"] = runtime
    app.register_blueprint(ops.blueprint)
    api = LetheApi(app)
    api.spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"})
    app.register_error_handler(LetheError, problems.from_lethe_error)
    app.register_error_handler(Exception, _unexpected)

    @app.before_request
    def _start_timer():
        request.environ["lethe.started"] = time.perf_counter()

    @app.after_request
    def _count(response):
        route = request.url_rule.rule if request.url_rule else "unmatched"
        metrics.HTTP_REQUESTS.labels(route, request.method, str(response.status_code)).inc()
        started = request.environ.get("lethe.started")
        if started is not None:
            metrics.HTTP_DURATION.labels(route, request.method).observe(time.perf_counter() - started)
        return response

    return app


def _unexpected(error: Exception):
    if isinstance(error, HTTPException):
        return problems.from_http_exception(error)
    return problems.from_unexpected(error)
