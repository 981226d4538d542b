"""The Flask application factory (D1, D13): flask-smorest with OpenAPI at /openapi.json and docs at /docs."""

from __future__ import annotations

import http
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import psycopg
from flask import Flask, Response, current_app, g, request
from flask_smorest import Api
from flask_smorest.utils import prepare_response
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Rule

from app.api import (
    common,
    console,
    drafts,
    erasures,
    events,
    explain,
    files,
    holds,
    json_body,
    limits,
    links,
    messages,
    ops,
    principals,
    problems,
    receipts,
    slots,
    tracing,
    tus,
    uploads,
)
from app.api.auth import Authenticator
from app.api.schemas import ProblemSchema
from app.domain.journal import GUARD_DETAIL
from app.domain.rates import POLICIES
from app.errors import LetheError
from app.lifecycle.journal import RestoreGuard
from app.platform.observability import metrics

if TYPE_CHECKING:
    from app.runtime import Runtime

API_PREFIX = "/api/v1/"
SWAGGER_ASSETS = "/docs/assets/"


def _swagger_asset(name: str) -> Response:
    """A file of the pinned Swagger UI (package swagger-ui-bundle); send_from_directory refuses any path out
    of its directory."""
    from flask import send_from_directory
    from swagger_ui_bundle import swagger_ui_path

    return send_from_directory(swagger_ui_path, name, max_age=86400)


class _Rule(Rule):
    """A URL rule whose builder (the Python werkzeug compiles for url_for, two a rule: more than half of the
    CPU of building the app) is compiled at its first use: only the console's pages build URLs."""

    def _compile_builder(self, append_unknown: bool = True) -> Any:
        compiled: Any = None

        def build(rule: Rule, **values: Any) -> tuple[str, str]:
            nonlocal compiled
            if compiled is None:
                compiled = Rule._compile_builder(rule, append_unknown)
            return cast(tuple[str, str], compiled(rule, **values))

        return build


class _Flask(Flask):
    url_rule_class = _Rule


class LetheApi(Api):
    """flask-smorest's Api with every error answered and documented as problem+json, and its OpenAPI document
    built when it is first asked for: the routes are registered at once, their pages of the document and its
    error responses (marshmallow and apispec work that no request needs) on the first /openapi.json."""

    ERROR_SCHEMA: Any = ProblemSchema

    def __init__(self, app: Flask) -> None:
        self._undocumented: list[tuple[Any, str, Any]] = []
        self._components_pending = True
        self._documenting = threading.Lock()
        super().__init__(app)

    def register_blueprint(self, blp: Any, *, parameters: Any = None, **options: Any) -> None:
        """Register a blueprint's routes now, and its views in the document once the document is asked for."""
        name = options.get("name", blp.name)
        self._app.extensions["flask-smorest"]["blp_name_to_api"][name] = self
        self._app.register_blueprint(blp, **options)
        self._undocumented.append((blp, name, parameters))

    def documented(self) -> Any:
        """The OpenAPI document (apispec's APISpec), every blueprint's views in it."""
        with self._documenting:
            if self._components_pending:
                # In flask-smorest's order: the document's components come out as they always did
                self._document_responses()
                super()._register_etag_headers()
                super()._register_pagination_header()
                self._components_pending = False
            while self._undocumented:
                blp, name, parameters = self._undocumented[0]
                blp.register_views_in_doc(self, self._app, self.spec, name=name, parameters=parameters)
                self.spec.tag({"name": name, "description": blp.description})
                self._undocumented.pop(0)  # only once it is in the document: a failure is met again, never lost
        return self.spec

    def handle_http_exception(self, error: HTTPException) -> Response:
        """Every HTTP error flask-smorest raises is answered as problem+json."""
        return problems.from_http_exception(error)

    def _openapi_json(self) -> Response:
        """/openapi.json: the generated document with this installation's limits (app/api/contract.py)."""
        import json

        from app.api.contract import for_installation

        spec = for_installation(self.documented().to_dict(), current_app.extensions["lethe"])
        return Response(json.dumps(spec, indent=2), mimetype="application/json")

    # flask-smorest's calls at start: its components (error responses, ETag and pagination headers) wait for the
    # document (documented()).
    def _register_responses(self) -> None:
        pass

    def _register_etag_headers(self) -> None:
        pass

    def _register_pagination_header(self) -> None:
        pass

    def _document_responses(self) -> None:
        for status in http.HTTPStatus:
            response = {"description": status.phrase}
            if not (100 <= status < 200) and status not in (204, 304):
                response["schema"] = self.ERROR_SCHEMA
            prepare_response(response, self.spec, problems.MEDIA_TYPE)
            self.spec.components.response(status.name, response, lazy=True)
        response = {"description": "A problem (RFC 9457)", "schema": self.ERROR_SCHEMA}
        prepare_response(response, self.spec, problems.MEDIA_TYPE)
        self.spec.components.response("DEFAULT_ERROR", response, lazy=True)


def create_app(runtime: Runtime) -> Flask:
    """Build the api for a Runtime (its database, store, broker, clock and configuration)."""
    app = _Flask("lethe")
    app.config.update(
        API_TITLE="Lethe",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="/docs",
        # Swagger UI's assets come from a pinned package installed with Lethe, never from a CDN: /docs works on
        # an air-gapped cluster.
        OPENAPI_SWAGGER_UI_URL=SWAGGER_ASSETS,
        API_SPEC_OPTIONS={
            "security": [{"bearer": []}],
            "info": {
                "description": "Lethe's HTTP API. Every /api/v1 route needs a bearer "
                "token; errors are application/problem+json."
            },
        },
    )
    # No request body may exceed one part (plus room for headers of a multipart client): 413 beyond it.
    app.config["MAX_CONTENT_LENGTH"] = runtime.cfg.file.part_size + 64 * 1024
    app.extensions["lethe"] = runtime
    app.extensions["lethe.readiness"] = ops.readiness_for(runtime)
    app.extensions["lethe.schema"] = runtime.schema
    app.url_map.converters["segment"] = common.SegmentConverter
    app.url_map.converters["part"] = common.PartNumberConverter
    authenticator = Authenticator.from_config(runtime.cfg)
    limiter = limits.Limiter(
        runtime,
        {name: getattr(runtime.cfg.rate_limits, name) for name in POLICIES},
        (runtime.cfg.auth.jwt_secret or runtime.cfg.auth.jwt_public_key or "lethe").encode(),
    )
    tracing.instrument(app)  # server spans named by route (nothing when tracing is off)
    app.register_blueprint(ops.blueprint)
    app.register_blueprint(console.blueprint)
    app.add_url_rule(SWAGGER_ASSETS + "<path:name>", "swagger_assets", _swagger_asset)
    api = LetheApi(app)
    api.spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"})
    api.register_converter(common.SegmentConverter, common.segment_schema)
    api.register_converter(common.PartNumberConverter, common.part_number_schema)
    for module in (
        uploads,
        tus,
        files,
        links,
        messages,
        drafts,
        events,
        receipts,
        slots,
        erasures,
        holds,
        principals,
        explain,
    ):
        api.register_blueprint(module.blp)
    _allow_cors(app, runtime.cfg.api.cors_origins)
    app.register_error_handler(LetheError, problems.from_lethe_error)
    app.register_error_handler(Exception, _unexpected)

    guard = RestoreGuard(runtime)
    app.extensions["lethe.guard"] = guard

    @app.before_request
    def _authenticate() -> Response | None:
        request.environ["lethe.started"] = time.perf_counter()
        # A database restored from a backup is behind its deletion journal: until the journal is applied again,
        # no data request is served (a file deleted after the backup would be readable again).
        if request.path.startswith(API_PREFIX) and request.method != "OPTIONS":
            if not runtime.schema.verified:  # the first connection compares the migrations (a rollback)
                runtime.db.read(lambda conn: None)
            waiting = guard.reason()
            if waiting is not None:
                return problems.problem(
                    503,
                    "service_unavailable",
                    "Service unavailable",
                    reason=waiting,
                    detail=GUARD_DETAIL[waiting],
                    headers={"Retry-After": "10"},
                )
            guard.serving_request(True)
        # D11: every /api/v1 request without valid credentials is a 401 before anything is looked up
        # (Flask raises routing errors only after this hook).
        # An OPTIONS request carries no token: browsers send it first (CORS preflight, tus discovery), and its
        # answer says nothing of any file.
        # A file link carries its own credential (the sealed token), checked with the file by its handler.
        if (
            request.path.startswith(API_PREFIX)
            and request.method != "OPTIONS"
            and not request.path.startswith(links.PREFIX)
        ):
            policy = limiter.policy_of(app, request)
            try:
                g.principal = authenticator.principal(request.headers.get("Authorization"))
            except LetheError:
                # Counted per client address: a flood of bad credentials at what costs meets a limit too
                if policy is not None and not (counted := limiter.count(policy, None, request.remote_addr)).allowed:
                    return limits.refused(counted)
                raise
            if policy is not None:
                g.rate = limiter.count(policy, g.principal, None)
                if not g.rate.allowed:
                    return limits.refused(g.rate)
            reads_json = request.method in ("POST", "PUT", "PATCH") and _reads_json(request.endpoint, request.method)
            if reads_json and _json_body_expected_but_not_sent():
                return problems.problem(
                    415, reason="json_expected", detail="Send the body as JSON with Content-Type: application/json."
                )
            unreadable = _unreadable_json_body(runtime.cfg.api.max_json_depth) if reads_json else None
            if unreadable is not None:
                reason, detail = unreadable
                return problems.problem(400, reason=reason, detail=detail)
        return None

    @app.teardown_request
    def _served(exc: BaseException | None) -> None:
        guard.serving_request(False)

    @app.after_request
    def _count(response: Response) -> Response:
        counted = g.get("rate")
        if counted is not None:  # every answer of a limited operation says where the client stands
            for name, value in counted.headers().items():
                response.headers.setdefault(name, value)
        route = request.url_rule.rule if request.url_rule else "unmatched"
        metrics.HTTP_REQUESTS.labels(route, request.method, str(response.status_code)).inc()
        started = request.environ.get("lethe.started")
        if started is not None:
            metrics.HTTP_DURATION.labels(route, request.method).observe(time.perf_counter() - started)
        return response

    return app


def _allow_cors(app: Flask, origins: tuple[str, ...]) -> None:
    """CORS on /api/v1 for the origins of `api.cors_origins` (browser tus clients such as Uppy), with
    the tus headers readable; none at all when the key is empty. Bearer tokens are headers, not cookies: no
    credentials mode."""
    if not origins:
        return
    from flask_cors import CORS

    from app.domain.tus import EXPOSED_HEADERS, REQUEST_HEADERS

    CORS(
        app,
        resources={API_PREFIX + "*": {"origins": "*" if "*" in origins else list(origins)}},
        allow_headers=list(REQUEST_HEADERS),
        expose_headers=list(EXPOSED_HEADERS),
        methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
        max_age=600,
        supports_credentials=False,
        vary_header=True,
    )


def _reads_json(endpoint: str | None, method: str) -> bool:
    """Whether the handler of this endpoint and method takes a JSON body (flask-smorest's arguments)."""
    from flask import current_app

    view = current_app.view_functions.get(endpoint or "")
    handler = getattr(getattr(view, "view_class", None), method.lower(), None)
    parameters = getattr(handler, "_apidoc", {}).get("arguments", {}).get("parameters", [])
    return any(parameter.get("in") == "json" for parameter in parameters)


def _json_body_expected_but_not_sent() -> bool:
    """Of a request to an endpoint that reads JSON: a body sent with another Content-Type, answered
    415 saying what to send, not 422 "Missing data" for fields the client did send."""
    if request.is_json:
        return False
    return bool(request.content_length) or request.headers.get("Transfer-Encoding", "").lower() == "chunked"


def _unreadable_json_body(max_depth: int) -> tuple[str, str] | None:
    """Of a request to an endpoint that reads JSON: why its JSON body cannot be read (malformed, too deep), or
    None."""
    if not request.is_json:
        return None
    raw = request.get_data(cache=True)
    return json_body.body_problem(raw, max_depth) if raw else None


def _unexpected(error: Exception) -> Response:
    if isinstance(error, HTTPException):
        return problems.from_http_exception(error)
    if isinstance(error, psycopg.Error):  # psycopg_pool's PoolTimeout is one too (an OperationalError)
        return problems.from_database_error(error)
    return problems.from_unexpected(error)
