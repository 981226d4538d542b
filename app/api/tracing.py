"""The api's server spans: one a request, named by its method and route (never its path), continuing a caller's
traceparent; nothing when tracing is off (app/platform/tracing.py).

Lethe's own request hooks rather than the Flask instrumentation: they set the few attributes that may leave and
nothing else (the instrumentation's URL, client and header attributes would only be dropped again by the
name-free exporter), at a fraction of its cost a request (docs/performance.md)."""

from __future__ import annotations

from typing import Any

from flask import Flask, request
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from app.platform import tracing

UNTRACED = frozenset({"/healthz", "/readyz", "/metrics"})


def instrument(app: Flask) -> None:
    """Add the hooks that make each request (but health and metrics) a server span."""
    if not tracing.enabled():
        return

    def start() -> None:
        if request.path in UNTRACED:
            return
        rule = request.url_rule.rule if request.url_rule is not None else None
        started = tracing.TRACER.start_span(
            f"{request.method} {rule}" if rule else request.method,
            context=propagate.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": request.method, **({"http.route": rule} if rule else {})},
        )
        request.environ["lethe.span"] = (started, otel_context.attach(trace.set_span_in_context(started)))

    def answered(response: Any) -> Any:
        taken = request.environ.get("lethe.span")
        if taken is not None:
            taken[0].set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                taken[0].set_status(Status(StatusCode.ERROR))
        return response

    def end(exc: BaseException | None) -> None:
        taken = request.environ.pop("lethe.span", None)
        if taken is not None:
            started, token = taken
            tracing.end_span(started, token, exc)

    app.before_request_funcs.setdefault(None, []).insert(0, start)  # before authentication: its spans are inside
    app.after_request(answered)
    app.teardown_request(end)
