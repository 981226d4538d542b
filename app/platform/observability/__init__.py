"""Logs, Sentry and the metrics registry (D15).

Logs are one JSON object a line on stdout (or a readable console line for `lethe dev`), with an event
name, the role, counts, durations and at most a file id. Nothing here may carry a file name, object key,
digest or token; SensitiveFieldFilter blanks such fields should a caller pass one by mistake, and Sentry
events keep only an allow-list of members.
"""

from __future__ import annotations

import logging
import re
import os
import sys
import traceback
from typing import Any

from pythonjsonlogger.json import JsonFormatter

# Extra fields that must never reach a log line, whatever a caller passes (D15).
SENSITIVE_FIELDS = frozenset({
    "original_name", "file_name", "filename_", "object_key", "key", "keys", "sha256", "digest", "token",
    "authorization", "password", "secret", "dsn", "url", "database_url", "broker_url", "scope_name",
})
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
REDACTED = "[redacted]"


class RoleFilter(logging.Filter):
    def __init__(self, role: str):
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        return True


# Values that are secrets whatever the field is called: an object key of Lethe's schema, a hex digest, a JWT.
_SECRET_SHAPES = re.compile(r"^(?:f/[0-9a-f]{2}/[0-9a-f]{2}/|uploads/)|^[0-9a-fA-F]{40,}$|^eyJ[\w-]*\.[\w-]*\.")


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SensitiveFieldFilter(logging.Filter):
    """Blank extra fields by field list and by value shape (D15): a field whose name says it holds a name,
    key, digest, token or secret is blanked unless its value is a number (a count is not a secret: `keys=6`);
    a string shaped like an object key, a digest or a token is blanked under any name."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in list(record.__dict__.items()):
            if name in _STANDARD:
                continue
            if name in SENSITIVE_FIELDS and not _is_count(value):
                setattr(record, name, REDACTED)
            elif isinstance(value, str) and _SECRET_SHAPES.search(value):
                setattr(record, name, REDACTED)
        return True


def format_exception_safely(exc_info) -> str:
    """A traceback with exception types and frames only, never an exception's message: a database error's
    text carries its DETAIL (row values, "Failing row contains ..."), an OSError its path, a minio error its
    key (D15). The chain of causes is kept, by type."""
    _, value, _ = exc_info
    chain = []
    seen: set[int] = set()
    while value is not None and id(value) not in seen:
        seen.add(id(value))
        chain.append(value)
        value = value.__cause__ or (None if value.__suppress_context__ else value.__context__)
    lines: list[str] = []
    for exc in reversed(chain):
        if lines:
            lines.append("The above exception led to:")
        lines.append("Traceback (most recent call last):")
        for frame in traceback.extract_tb(exc.__traceback__):
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}')
        sqlstate = getattr(exc, "sqlstate", None)
        lines.append(f"{type(exc).__module__}.{type(exc).__qualname__}"
                     + (f" (sqlstate {sqlstate})" if isinstance(sqlstate, str) else "") + ": [message withheld]")
    return "\n".join(lines)


class SafeJsonFormatter(JsonFormatter):
    """JSON lines whose exceptions are formatted by format_exception_safely."""

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        return format_exception_safely(ei)

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = None  # another handler's cached text could hold a message
        return super().format(record)


class ConsoleFormatter(logging.Formatter):
    """`12:00:01 INFO  lethe.outbox outbox relayed count=3` - readable, for lethe dev."""

    def formatException(self, ei) -> str:  # noqa: N802 - logging's name
        return format_exception_safely(ei)

    def format(self, record: logging.LogRecord) -> str:
        extras = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and k != "role"}
        line = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} {record.name} {record.getMessage()}"
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def make_formatter(fmt: str = "json") -> logging.Formatter:
    """The formatter of log.format: one JSON object a line, or a readable console line."""
    if fmt == "console":
        return ConsoleFormatter()
    return SafeJsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
        timestamp=False,
    )


def gunicorn_logconfig(role: str, fmt: str, level: str) -> dict:
    """A logging dictConfig for gunicorn, so that its own lines (worker boots, timeouts) come out in the
    same format and through the same filters as Lethe's."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"role": {"()": RoleFilter, "role": role}, "sensitive": {"()": SensitiveFieldFilter}},
        "formatters": {"lethe": {"()": make_formatter, "fmt": fmt}},
        "handlers": {"stdout": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout",
                                "formatter": "lethe", "filters": ["role", "sensitive"]}},
        "root": {"level": level, "handlers": ["stdout"]},
        "loggers": {"gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
                    "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True}},
    }


def setup_logging(role: str, fmt: str = "json", level: str = "INFO", stream=None) -> None:
    """Configure the root logger once for a process: one line a record on stdout (or the given stream)."""
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(make_formatter(fmt))
    handler.addFilter(RoleFilter(role))
    handler.addFilter(SensitiveFieldFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    quiet_libraries()


NOISY_LIBRARIES = ("pika", "urllib3", "minio", "werkzeug", "apscheduler", "yoyo", "psycopg.pool")


def quiet_libraries() -> None:
    """Libraries that log URLs (and so object keys) or connection strings at DEBUG and INFO stay at WARNING,
    whatever log.level says (D15). urllib3 and psycopg_pool stay at ERROR, pika at CRITICAL: during an outage it warns at every reconnect
    attempt with libpq's multi-line text, and Lethe says the same once per request or tick by event name
    (api.database_unavailable, scheduler.database_unavailable, worker.database_unavailable)."""
    for noisy in NOISY_LIBRARIES:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    # urllib3 warns of each retry with the request's URL, which holds an object key: the S3 driver's own
    # errors say what failed by S3 code instead.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    # pika logs every failed connect at ERROR with a stack trace; an outage of RabbitMQ is reported by
    # outbox.publish_failed, api.not_ready and dramatiq's consumer warnings.
    logging.getLogger("pika").setLevel(logging.CRITICAL)


# -- Sentry ----------------------------------------------------------------------------------------------------

_SENTRY_KEEP = {"event_id", "timestamp", "level", "logger", "platform", "release", "environment",
                "server_name", "exception", "tags", "contexts", "transaction", "modules", "sdk", "type"}


def scrub_event(event: dict[str, Any], hint: Any = None) -> dict[str, Any]:
    """Sentry before_send: keep an allow-list of members, drop request bodies, headers, cookies, query
    strings, local variables, breadcrumbs and extras (D15)."""
    clean = {key: value for key, value in event.items() if key in _SENTRY_KEEP}
    request = event.get("request")
    if isinstance(request, dict):
        clean["request"] = {"method": request.get("method"), "url": request.get("url", "").split("?")[0]}
    for exc in (clean.get("exception") or {}).get("values", []) or []:
        exc["value"] = "[message withheld]"  # an exception's text may quote a row, a path or a key
        for frame in (exc.get("stacktrace") or {}).get("frames", []) or []:
            frame.pop("vars", None)
    return clean


def setup_sentry(dsn: str, role: str, transport=None) -> None:
    """Initialise sentry-sdk when a DSN is set: no PII (the default), no request bodies, no local
    variables, no breadcrumbs, no transactions, and scrub_event on every event."""
    if not dsn:
        return
    import sentry_sdk

    options = {}
    if transport is not None:
        options["transport"] = transport  # tests capture what would be sent
    sentry_sdk.init(
        dsn=dsn,
        before_send=scrub_event,  # type: ignore[arg-type]  # a plain dict in, a plain dict out
        before_send_transaction=lambda event, hint: None,
        max_request_body_size="never",
        include_local_variables=False,
        max_breadcrumbs=0,
        **options,
    )
    sentry_sdk.set_tag("role", role)


# -- Prometheus ------------------------------------------------------------------------------------------------

def metrics_registry():
    """The registry to expose: aggregated over processes when PROMETHEUS_MULTIPROC_DIR is set (gunicorn and
    dramatiq fork several processes, D15), else the default one."""
    from prometheus_client import REGISTRY, CollectorRegistry, multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def prepare_multiprocess_dir(path: str | None = None) -> str:
    """Set PROMETHEUS_MULTIPROC_DIR to an empty directory before prometheus_client is imported.

    Must run before anything imports prometheus_client in a role that forks (api, worker)."""
    import tempfile

    path = path or os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="lethe-metrics-")
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        if name.endswith(".db"):
            os.unlink(os.path.join(path, name))
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path
