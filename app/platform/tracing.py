"""OpenTelemetry tracing: off unless the standard variables ask for it, name-free when on.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or
`OTEL_TRACES_EXPORTER`) is set, and off with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. The SDK reads
the rest of the standard variables itself (sampler, batch sizes, headers, timeouts, resource attributes); the
service name defaults to `lethe-<role>`. Spans leave by OTLP over HTTP with protobuf (`otlp`), or on stdout
(`console`).

The context crosses every hop Lethe owns: the api request (app/api/tracing.py), the outbox row (its
`traceparent`), the publisher and the relay (`outbox.publish`), the Dramatiq message (TracingMiddleware: there is
no instrumentation for Dramatiq), the actor, the store calls (`traced_store`), the webhook attempts, and the
scheduler's periodic jobs as roots of their own. Each unit of work is a span (`tx <name>`), not each statement: a
statement's text says nothing a transaction's name does not, and a span per statement cost more than the rest.

Every exported span passes NameFreeExporter first: attributes are kept only by an allow-list of keys (Lethe's own
`lethe.*`, and the HTTP and messaging keys that carry no user data), string values shaped like an object key, a
digest or a token are dropped, exception messages and status descriptions go (an exception's type stays). A
span of Lethe never holds a file name, an object key, a digest, a token or a text.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dramatiq
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from contextvars import Token

    from dramatiq.broker import MessageProxy
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter  # the SDK: imported by setup() when tracing is on

TRACER = trace.get_tracer("lethe")
# A job's traceparent is W3C trace context whatever OTEL_PROPAGATORS says (Lethe writes it itself: traceparent()).
_W3C = TraceContextTextMapPropagator()
PROTOCOLS = ("http/protobuf",)
EXPORTERS = ("otlp", "console", "none")
_state = {"on": False}

# Keys of attributes that leave the process (besides Lethe's own lethe.*): none of them can carry a name, a key,
# a digest, a token or a text. URLs, paths, query strings, user agents and client addresses are not among them.
ALLOWED = frozenset(
    {
        "http.request.method",
        "http.response.status_code",
        "http.route",
        "messaging.system",
        "messaging.operation",
        "messaging.destination.name",
        "messaging.message.id",
        "exception.type",
    }
)
# A string shaped like an object key of Lethe's schema (not a route's `/uploads/`), a hex digest or a JWT.
_SECRET_SHAPES = re.compile(r"(?<![\w/-])(?:f/[0-9a-f]{2}/[0-9a-f]{2}/|uploads/)|[0-9a-fA-F]{40,}|eyJ[\w-]*\.[\w-]*\.")


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [name.strip().lower() for name in env.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if exporters:
        return exporters != ["none"]
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def config_errors(env: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """What Lethe cannot honour of the OTEL_* variables, by variable (never its value)."""
    env = os.environ if env is None else env
    errors: dict[str, list[str]] = {}
    if not wanted(env):
        return errors
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if env.get(name) and env[name].strip() not in PROTOCOLS:
            errors[name] = ["Lethe sends traces over OTLP/HTTP with protobuf: use http/protobuf (or leave it unset)."]
    for exporter in env.get("OTEL_TRACES_EXPORTER", "").split(","):
        if exporter.strip() and exporter.strip().lower() not in EXPORTERS:
            errors["OTEL_TRACES_EXPORTER"] = ["Not an exporter Lethe has: otlp, console or none."]
    return errors


def enabled() -> bool:
    """Whether this process exports traces."""
    return bool(_state["on"])


def setup(role: str) -> bool:
    """Install the tracer provider of this process when the environment asks for traces; returns whether it did.
    Call once per process, before it serves (a forked child keeps its parent's provider: the SDK's batch
    processor starts its thread again after a fork)."""
    if _state["on"] or not wanted():
        return _state["on"]
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    attributes: dict[str, Any] = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes[SERVICE_NAME] = f"lethe-{role}"
    provider = TracerProvider(resource=Resource.create(attributes))
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    for name in names or ["otlp"]:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        elif name == "console":
            exporter = ConsoleSpanExporter()
        else:
            continue
        provider.add_span_processor(BatchSpanProcessor(name_free_exporter(exporter)))
    trace.set_tracer_provider(provider)
    _state["on"] = True
    return True


def shutdown() -> None:
    """Export what is buffered (a role that stops)."""
    provider = trace.get_tracer_provider()
    if _state["on"] and hasattr(provider, "shutdown"):
        provider.shutdown()


@contextmanager
def span(name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any) -> Iterator[trace.Span]:
    """A span of Lethe, current while the block runs; attributes are named `lethe.<name>` and hold ids, counts,
    kinds and outcomes only."""
    with TRACER.start_as_current_span(name, kind=kind, attributes=_ours(attributes)) as current:
        yield current


def count(**attributes: Any) -> None:
    """Add counts (or kinds, outcomes) to the current span."""
    current = trace.get_current_span()
    if current.is_recording():
        current.set_attributes(_ours(attributes))


def _ours(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {
        (name if "." in name else f"lethe.{name}"): str(value) if not isinstance(value, (bool, int, float)) else value
        for name, value in attributes.items()
        if value is not None
    }


def traceparent() -> str | None:
    """The W3C traceparent of the current span (None without one): what an outbox row keeps for its job. Written
    here rather than by the propagators: a job carries W3C trace context whatever OTEL_PROPAGATORS says, and this
    runs for every job a request commits."""
    if not _state["on"]:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@contextmanager
def continued(parent: str | None, name: str, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any) -> Iterator[None]:
    """A span continuing the trace of a traceparent (a job's), current while the block runs; a root span without
    one."""
    if not _state["on"]:
        yield
        return
    ctx = _W3C.extract({"traceparent": parent}) if parent else otel_context.Context()
    with TRACER.start_as_current_span(name, context=ctx, kind=kind, attributes=_ours(attributes)):
        yield


def traced_store(store: Any, name: str) -> Any:
    """The store with a span around each call (its operation, the store's name, how many keys and under which
    prefix: never a key); the store itself without tracing."""
    if not _state["on"]:
        return store
    return _TracedStore(store, name)


def _prefix(value: Any) -> str | None:
    if isinstance(value, str) and "/" in value:
        return value.split("/", 1)[0]
    return None


_NOT_CALLS = frozenset({"part_keys"})  # what a driver works out without calling its store


class _TracedStore:
    """A proxy whose calls are spans (`store.<operation>`)."""

    def __init__(self, store: Any, name: str):
        self._store = store
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._store, attribute)
        if attribute.startswith("_") or attribute in _NOT_CALLS or not callable(value):
            return value

        def called(*args: Any, **kwargs: Any) -> Any:
            keys: int | None = None
            first = args[0] if args else None
            prefix = _prefix(first)
            if isinstance(first, Iterable) and not isinstance(first, (str, bytes, bytearray, memoryview)):
                listed = list(first)
                keys, prefix = len(listed), (_prefix(listed[0]) if listed else None)
                args = (listed, *args[1:])
            with TRACER.start_as_current_span(
                f"store.{attribute}",
                kind=SpanKind.CLIENT,
                attributes=_ours({"store": self._name, "operation": attribute, "keys": keys, "prefix": prefix}),
            ):
                return value(*args, **kwargs)

        return called


class TracingMiddleware(dramatiq.Middleware):
    """Carries the trace through a Dramatiq message: a message enqueued inside a span carries its traceparent in
    its options, and each job runs in a consumer span (`job <actor>`) continuing it."""

    def __init__(self) -> None:
        self._local = threading.local()

    def before_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int) -> None:
        if _state["on"] and "traceparent" not in message.options:
            parent = traceparent()
            if parent:
                message.options["traceparent"] = parent

    def before_process_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        if not _state["on"]:
            return
        parent = message.options.get("traceparent")
        ctx = _W3C.extract({"traceparent": parent}) if isinstance(parent, str) else otel_context.Context()
        queued_ms = max(int(time.time() * 1000) - int(message.message_timestamp), 0)
        started = TRACER.start_span(
            f"job {message.actor_name}",
            context=ctx,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "rabbitmq",
                "messaging.operation": "process",
                "messaging.destination.name": message.queue_name,
                "messaging.message.id": message.message_id,
                "lethe.actor": message.actor_name,
                "lethe.retries": int(message.options.get("retries", 0)),
                "lethe.queued_ms": queued_ms,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(started))
        self._spans()[message.message_id] = (started, token)

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: MessageProxy,
        *,
        result: Any | None = None,
        exception: BaseException | None = None,
    ) -> None:
        taken = self._spans().pop(message.message_id, None)
        if taken is None:
            return
        started, token = taken
        end_span(started, token, exception)

    def after_skip_message(self, broker: dramatiq.Broker, message: MessageProxy) -> None:
        self.after_process_message(broker, message)

    def _spans(self) -> dict[str, tuple[trace.Span, Token[otel_context.Context]]]:
        spans: dict[str, tuple[trace.Span, Token[otel_context.Context]]] | None = getattr(self._local, "spans", None)
        if spans is None:
            spans = self._local.spans = {}
        return spans


def end_span(started: trace.Span, token: Token[otel_context.Context], exc: BaseException | None) -> None:
    """End a span made current by hand (a job's, a request's), with the error that ended its work if any."""
    if exc is not None:
        started.record_exception(exc)
        started.set_status(Status(StatusCode.ERROR))
    started.end()
    otel_context.detach(token)


def _clean_value(key: str, value: Any) -> Any:
    if isinstance(value, str) and _SECRET_SHAPES.search(value):
        return None
    if isinstance(value, (list, tuple)):
        kept = [item for item in value if not (isinstance(item, str) and _SECRET_SHAPES.search(item))]
        return tuple(kept)
    return value


def name_free(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The attributes a span may export: allowed keys, values that cannot be a key, a digest or a token."""
    kept: dict[str, Any] = {}
    for key, value in (attributes or {}).items():
        if key.startswith("lethe.") or key in ALLOWED:
            cleaned = _clean_value(key, value)
            if cleaned is not None:
                kept[key] = cleaned
    return kept


def _span_name(name: str) -> str:
    return "span" if _SECRET_SHAPES.search(name) else name


def name_free_exporter(inner: SpanExporter) -> SpanExporter:
    """A span exporter that exports name-free copies of spans (the allow-list above) through `inner`. Made by
    setup() only: the SDK it subclasses is not imported by a process that does not trace."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class NameFreeExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return inner.export([scrubbed(s) for s in spans])

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return NameFreeExporter()


def scrubbed(span_: ReadableSpan) -> ReadableSpan:
    """A copy of a span with only what may leave: allowed attributes, events by name with allowed attributes,
    the status's code without its description."""
    from opentelemetry.sdk.trace import Event
    from opentelemetry.sdk.trace import ReadableSpan as Readable

    attributes = span_.attributes or {}
    kept = name_free(attributes)
    if (
        len(kept) == len(attributes)
        and all(kept[key] is value for key, value in attributes.items())
        and not span_.events
        and not span_.links
        and not span_.status.description
        and _span_name(span_.name) == span_.name
    ):
        return span_  # nothing to take out (most of Lethe's own spans): no copy
    return Readable(
        name=_span_name(span_.name),
        context=span_.context,
        parent=span_.parent,
        resource=span_.resource,
        attributes=kept,
        events=[Event(e.name, name_free(e.attributes), e.timestamp) for e in span_.events],
        links=[trace.Link(link.context, name_free(link.attributes)) for link in span_.links],
        kind=span_.kind,
        status=Status(span_.status.status_code),
        start_time=span_.start_time,
        end_time=span_.end_time,
        instrumentation_scope=span_.instrumentation_scope,
    )


def wrap(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """fn as a root span of its own (a scheduler's periodic job)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        with continued(None, name, SpanKind.INTERNAL):
            return fn(*args, **kwargs)

    run.__name__ = getattr(fn, "__name__", name)
    return run
