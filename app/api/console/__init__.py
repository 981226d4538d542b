"""The operator console under /console: read-only pages of counts and ids, server-rendered, with a strict
Content-Security-Policy (no inline script or style, nothing from outside the image) and no name, key or digest.

A session comes from a one-time sign-in link (`lethe console`): the link's page asks for one click (a POST), so
a link preview that fetches the page does not use it up, and the cookie is set by a same-site request (it is
`SameSite=Strict`). Every page checks the session and its scope; the sign-out form carries the session's CSRF
token. A request with the header `X-Console-Partial` gets only the page's <main> (console.js refreshes it).
"""

from __future__ import annotations

import logging
import re
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, abort, current_app, g, make_response, redirect, render_template, request
from werkzeug.wrappers import Response

from app.domain.access import MANAGE
from app.lifecycle import console
from app.lifecycle.explain import explain_file, explain_subject
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

blueprint = Blueprint("console", __name__, url_prefix="/console", template_folder="templates", static_folder="static")

COOKIE = "lethe_console"
PARTIAL = "X-Console-Partial"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; report-uri /console/csp-report"
)
log = logging.getLogger("lethe.console")
_DIRECTIVE = re.compile(r"[a-z-]{1,40}")


@blueprint.app_template_filter("when")
def _when(at: datetime | None) -> str:
    """A time to the minute, in UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if at is not None else "-"


@blueprint.app_template_filter("bytes")
def _bytes(size: int) -> str:
    """A size in the largest binary unit it reaches."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _runtime() -> Any:
    return current_app.extensions["lethe"]


def signed_in(view: Callable[..., Any]) -> Callable[..., Any]:
    """A page for a signed-in operator with `manage`: 401 (the sign-in page) without a session, 403 without the
    scope."""

    @wraps(view)
    def checked(*args: Any, **kwargs: Any) -> Any:
        session = console.session_of(_runtime(), request.cookies.get(COOKIE))
        if session is None:
            return _page("console/signed_out.html", 401, reason="no_session")
        if MANAGE not in session.principal.scopes:
            return _page("console/signed_out.html", 403, reason="no_scope")
        g.console = session
        return view(*args, **kwargs)

    return checked


def _page(template: str, status: int = 200, **context: Any) -> Response:
    """A page, or only its <main> for a refresh (console.js)."""
    partial = request.headers.get(PARTIAL) == "1"
    session = g.get("console")
    body = render_template(template, partial=partial, session=session, **context)
    return make_response(body, status)


@blueprint.after_request
def _headers(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "same-origin"  # a sign-in link's token never leaves in a Referer
    if request.endpoint != "console.static":
        response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.get("/sign-in/<token>")
def sign_in_page(token: str) -> Response:
    """The page of a sign-in link: one button, if the link is still good."""
    if not console.link_usable(_runtime(), token):
        return _page("console/refused.html", 403)
    return _page("console/sign_in.html", token=token)


@blueprint.post("/sign-in/<token>")
def sign_in(token: str) -> Response:
    """Use the link up, open a session, and go to the overview."""
    rt = _runtime()
    signed = console.sign_in(rt, token)
    if signed is None:
        return _page("console/refused.html", 403)
    cookie, session = signed
    response = redirect("/console/", 303)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(rt.cfg.api.console_session_ttl.total_seconds()),
        path="/console",
        secure=rt.role != "all",  # lethe dev serves plain http on a laptop
        httponly=True,
        samesite="Strict",
    )
    return response


@blueprint.post("/sign-out")
@signed_in
def sign_out() -> Response:
    """End the session (the form carries its CSRF token)."""
    sent = request.form.get("csrf", "")
    if not secrets.compare_digest(sent.encode(), g.console.csrf.encode()) or not _same_origin():
        abort(403)
    console.sign_out(_runtime(), request.cookies.get(COOKIE, ""))
    response = redirect("/console/signed-out", 303)
    response.delete_cookie(COOKIE, path="/console", secure=_runtime().role != "all", httponly=True, samesite="Strict")
    return response


def _same_origin() -> bool:
    """A form post from another origin is refused (SameSite=Strict already keeps the cookie from it). The host is
    compared, not the scheme: behind an ingress that ends TLS the api sees http while the browser says https."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


@blueprint.get("/signed-out")
def signed_out() -> Response:
    """The page after sign-out."""
    return _page("console/signed_out.html", reason="signed_out")


@blueprint.get("/")
@signed_in
def overview() -> Response:
    """Backlogs, failures, pending work, the journal, keys, stores and usage."""
    rt = _runtime()
    data = console.overview(rt, current_app.extensions.get("lethe.guard"))
    return _page("console/overview.html", o=data, queues=sorted((data.queues or {}).items()))


@blueprint.get("/holds")
@signed_in
def holds() -> Response:
    """The holds, in force and released."""
    return _page("console/holds.html", holds=console.holds(_runtime()))


@blueprint.get("/holds/<uuid:hold_id>")
@signed_in
def hold(hold_id: uuid.UUID) -> Response:
    """One hold and the files it covers."""
    row, files = console.hold(_runtime(), hold_id)
    if row is None:
        return _page("console/missing.html", 404, what="hold")
    return _page("console/hold.html", hold=row, files=files)


@blueprint.get("/erasures")
@signed_in
def erasures() -> Response:
    """The latest erasures."""
    return _page("console/erasures.html", erasures=console.erasures(_runtime()))


@blueprint.get("/receipts")
@signed_in
def receipts() -> Response:
    """The latest deletion receipts."""
    return _page("console/receipts.html", receipts=console.receipts(_runtime()))


@blueprint.get("/webhooks")
@signed_in
def webhooks() -> Response:
    """The latest webhook deliveries, or the failed ones."""
    failed = request.args.get("failed") == "1"
    return _page("console/webhooks.html", deliveries=console.deliveries(_runtime(), failed), failed=failed)


@blueprint.get("/explain")
@signed_in
def explain() -> Response:
    """Why a file is still here, or what Lethe holds of a person: one box for either id."""
    asked = request.args.get("id", "").strip()
    if not asked:
        return _page("console/explain.html", asked="", file=None, subject=None)
    try:
        wanted = uuid.UUID(asked)
    except ValueError:
        return _page("console/explain.html", 400, asked="", file=None, subject=None, bad=True)
    rt = _runtime()
    file = explain_file(rt, g.console.principal, wanted)
    subject = explain_subject(rt, g.console.principal, wanted) if file["state"] == "unknown" else None
    return _page("console/explain.html", asked=str(wanted), file=file, subject=subject)


@blueprint.post("/csp-report")
def csp_report() -> Response:
    """A browser's report of a Content-Security-Policy violation: logged and counted by directive only (the
    report's URLs are never kept)."""
    report = request.get_json(force=True, silent=True)
    body = report.get("csp-report") if isinstance(report, dict) else None
    directive = body.get("effective-directive") or body.get("violated-directive", "") if isinstance(body, dict) else ""
    name = directive.split(" ")[0] if isinstance(directive, str) else ""
    name = name if _DIRECTIVE.fullmatch(name) else "unknown"
    metrics.CONSOLE_CSP_VIOLATIONS.labels(name).inc()
    log_event(log, "warning", "console.csp_violation", "console page broke its content policy", directive=name)
    return Response(status=204)
