"""The one place that turns errors into problem+json answers (RFC 9457; D12, D15).

A problem body carries `type, title, status, code`, `reason` for a 409, and for a 422 the names of the
fields that failed with marshmallow's messages. It never carries a value the client sent, a file name,
an object key, a digest or a token.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import psycopg
from flask import Response, json
from psycopg import errors as pg_errors
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from app.errors import LetheError
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.api")
PROBLEM_TYPE = "https://lethe.invalid/problems/"
MEDIA_TYPE = "application/problem+json"

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    411: "length_required",
    412: "precondition_failed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
    422: "invalid_request",
    429: "too_many_requests",
    460: "checksum_mismatch",
    500: "internal_error",
    501: "not_configured",
    503: "unavailable",
}


def problem(
    status: int,
    code: str | None = None,
    title: str | None = None,
    *,
    reason: str | None = None,
    detail: str | None = None,
    errors: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    fields: dict[str, Any] | None = None,
) -> Response:
    """Build a problem+json response; `fields`: members of its own a problem type adds (RFC 9457 extensions)."""
    code = code or _CODES.get(status, "error")
    body = {
        "type": PROBLEM_TYPE + code,
        "title": title or code.replace("_", " ").capitalize(),
        "status": status,
        "code": code,
    }
    if reason:
        body["reason"] = reason
    if detail:
        body["detail"] = detail
    if errors:
        body["errors"] = errors
    body.update(fields or {})
    response = Response(json.dumps(body, sort_keys=True), status=status, mimetype=MEDIA_TYPE)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


@functools.cache
def _known_fields() -> frozenset[str]:
    from marshmallow import Schema

    from app.api import schemas

    names = {"_schema"}
    for value in vars(schemas).values():
        if isinstance(value, type) and issubclass(value, Schema):
            names.update(value._declared_fields)
    return frozenset(names)


@functools.cache
def _field_reasons() -> dict[str, str]:
    """The reason a field's refusal answers with (its metadata's `reason`): a hold's case reference is
    `case_ref_invalid` whether the schema or the service refuses it."""
    from marshmallow import Schema

    from app.api import schemas

    found: dict[str, str] = {}
    for value in vars(schemas).values():
        if isinstance(value, type) and issubclass(value, Schema):
            for name, field in value._declared_fields.items():
                if field.metadata.get("reason"):
                    found[name] = field.metadata["reason"]
    return found


def _reason_of(errors: dict[str, Any] | None) -> str | None:
    """The one reason the failing fields share, when they name one."""
    reasons = {_field_reasons().get(name) for name in errors or {}}
    return reasons.pop() if len(reasons) == 1 else None


def _field_errors(exc: HTTPException) -> dict[str, Any] | None:
    """marshmallow's messages by field, as webargs puts them under exc.data["messages"] (keyed by location,
    then field). A field name the client made up is not echoed (it is text the client chose, D15): such
    fields are reported together as `unknown_fields`."""
    data = getattr(exc, "data", None) or {}
    messages = data.get("messages")
    if not isinstance(messages, dict):
        return None
    known = _known_fields()
    flat: dict[str, Any] = {}
    for location, fields in messages.items():
        for name, field_messages in fields.items() if isinstance(fields, dict) else [(location, fields)]:
            if name in known:
                flat[name] = field_messages
            else:
                flat["unknown_fields"] = ["Unknown field."]
    return flat


def from_http_exception(exc: HTTPException) -> Response:
    """A werkzeug HTTP error as problem+json."""
    status = exc.code or 500
    headers = {}
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        headers["Allow"] = ", ".join(sorted(exc.valid_methods))
    for name, value in ((getattr(exc, "data", None) or {}).get("headers") or {}).items():
        headers[name] = value
    if status == 401:
        headers.setdefault("WWW-Authenticate", "Bearer")
    detail = None
    if status == 413:
        from flask import current_app, request

        limit = request.max_content_length or current_app.config.get("MAX_CONTENT_LENGTH")
        from app.domain.uploads import human_size

        detail = f"The request body is larger than this request takes: at most {human_size(limit)}." if limit else None
    errors = _field_errors(exc) if status in (400, 422) else None
    return problem(
        status,
        errors=errors,
        detail=detail,
        headers=headers,
        reason="body_too_large" if status == 413 else _reason_of(errors),
    )


def from_lethe_error(exc: LetheError) -> Response:
    """One of Lethe's errors as problem+json (the one place that does, STYLE.md)."""
    headers: dict[str, str] = {}
    if exc.status == 503:
        # An outage is expected: one warning line, no stack trace, and when to ask again (D13).
        log_event(
            log, "warning", "api.unavailable", "a dependency is unavailable", code=exc.code, error=type(exc).__name__
        )
        headers["Retry-After"] = "5"
    elif exc.status >= 500:
        log_event(log, "error", "api.error", "request failed", error=type(exc).__name__)
    reason = getattr(exc, "reason", None)
    if exc.status == 401:
        # RFC 6750: a token that was sent and refused is invalid_token (expired ones too); none sent, no error.
        headers["WWW-Authenticate"] = (
            'Bearer error="invalid_token"' if reason in ("token_expired", "token_invalid") else "Bearer"
        )
    return problem(
        exc.status,
        exc.code,
        exc.title,
        reason=reason,
        detail=getattr(exc, "detail", None),
        headers=headers,
        fields=getattr(exc, "fields", None),
    )


# A constraint the schema validation should have met first; answered as a client error, never a 500, and
# logged by constraint name and SQLSTATE only: the error's text holds PostgreSQL's DETAIL with row values.
_CONFLICTS = (
    pg_errors.UniqueViolation,
    pg_errors.ForeignKeyViolation,
    pg_errors.RestrictViolation,
    pg_errors.ExclusionViolation,
)


def from_database_error(exc: psycopg.Error) -> Response:
    """A database error as problem+json: an outage 503, a constraint 409/422, never a 500 with details."""
    diag = getattr(exc, "diag", None)
    if isinstance(exc, (pg_errors.IntegrityError, pg_errors.DataError)):
        log_event(
            log,
            "warning",
            "api.constraint_violation",
            "a request met a database constraint",
            sqlstate=exc.sqlstate,
            constraint=getattr(diag, "constraint_name", None),
            error=exc,
        )
        return problem(409 if isinstance(exc, _CONFLICTS) else 422, reason="constraint_violation")
    if isinstance(exc, psycopg.OperationalError):
        log_event(log, "warning", "api.database_unavailable", "the database is unavailable", error=type(exc).__name__)
        return problem(503, "service_unavailable", "Service unavailable", headers={"Retry-After": "5"})
    return from_unexpected(exc)


def from_unexpected(exc: Exception) -> Response:
    # The type name only: an exception's message may quote data (D15).
    """Anything else: 500, logged with the type only (D15)."""
    log_event(log, "exception", "api.unhandled", "unhandled error", error=type(exc).__name__)
    return problem(500)
