"""Helpers shared by the blueprints: the caller, the runtime, and documented problem answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from flask import current_app, g
from werkzeug.routing import UnicodeConverter

from app.api.problems import MEDIA_TYPE
from app.api.schemas import SEGMENT, SEGMENT_RE, ProblemSchema
from app.domain.access import Principal
from app.errors import Invalid

if TYPE_CHECKING:
    from app.runtime import Runtime

F = TypeVar("F", bound=Callable[..., Any])


def runtime() -> Runtime:
    """The Runtime of the app serving this request."""
    serving: Runtime = current_app.extensions["lethe"]
    return serving


def caller() -> Principal:
    """The authenticated principal (set before any /api/v1 handler runs)."""
    principal: Principal = g.principal
    return principal


def segment(value: str, reason: str) -> str:
    """A client-supplied id segment: `[A-Za-z0-9:_-]{1,128}`, else 422."""
    if not SEGMENT_RE.fullmatch(value):
        raise Invalid(reason)
    return value


_NON_STANDARD = {460: "Checksum Mismatch (tus)"}  # statuses http.HTTPStatus does not know


def problems(blp: Any, *statuses: int) -> Callable[[F], F]:
    """Document problem+json answers of an endpoint (401 is on every /api/v1 route)."""

    def decorate(func: F) -> F:
        for status in sorted({401, *statuses}, reverse=True):
            func = blp.alt_response(
                status, schema=ProblemSchema, content_type=MEDIA_TYPE, description=_NON_STANDARD.get(status)
            )(func)
        return func

    return decorate


class PartNumberConverter(UnicodeConverter):
    """A part number: any segment, so that `-1`, `abc` and `0` all reach the handler and answer the same 409
    part_number_out_of_range, instead of a routing 404 for some. Not a number: 0 (out of range)."""

    def to_python(self, value: str) -> int:
        """The part number in the path; anything but a number is 0, answered 409 like any other out of range."""
        return int(value) if re.fullmatch(r"-?[0-9]{1,9}", value) else 0


def part_number_schema(converter: Any) -> dict[str, Any]:
    """The OpenAPI schema of a part number in a path."""
    return {"type": "integer", "minimum": 1}


class SegmentConverter(UnicodeConverter):
    """A path segment that the handler checks against `[A-Za-z0-9:_-]{1,128}` (422 with a reason, rather
    than a routing 404); the OpenAPI document carries the pattern."""


def segment_schema(converter: Any) -> dict[str, Any]:
    """The OpenAPI schema of a checked path segment."""
    return {"type": "string", "pattern": SEGMENT}
