"""Log formatting and set-up for every role (D15): one JSON object a line (or a readable console line for
`lethe dev`), the role on every line, the scrubbing filter of logs.py on every handler, and the libraries
that would log URLs or connection strings kept quiet."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

from app.platform.observability.logs import STANDARD_ATTRIBUTES, SensitiveFieldFilter, format_exception_safely


class RoleFilter(logging.Filter):
    def __init__(self, role: str):
        super().__init__()
        self.role = role

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        span = trace.get_current_span().get_span_context()
        if span.is_valid:  # a line inside a span names it: from a worker's line to its trace
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        return True


# Values that are secrets whatever the field is called: an object key of Lethe's schema, a hex digest, a JWT.


class SafeJsonFormatter(JsonFormatter):
    """JSON lines whose exceptions are formatted by format_exception_safely."""

    def formatException(self, ei: Any) -> str:
        return format_exception_safely(ei)

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = None  # another handler's cached text could hold a message
        return super().format(record)


class ConsoleFormatter(logging.Formatter):
    """`12:00:01 INFO  lethe.outbox outbox relayed count=3` - readable, for lethe dev."""

    def formatException(self, ei: Any) -> str:
        return format_exception_safely(ei)

    def format(self, record: logging.LogRecord) -> str:
        extras = {k: v for k, v in record.__dict__.items() if k not in STANDARD_ATTRIBUTES and k != "role"}
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


def gunicorn_logconfig(role: str, fmt: str, level: str) -> dict[str, Any]:
    """A logging dictConfig for gunicorn, so that its own lines (worker boots, timeouts) come out in the
    same format and through the same filters as Lethe's."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"role": {"()": RoleFilter, "role": role}, "sensitive": {"()": SensitiveFieldFilter}},
        "formatters": {"lethe": {"()": make_formatter, "fmt": fmt}},
        "handlers": {
            "stdout": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                "formatter": "lethe",
                "filters": ["role", "sensitive"],
            }
        },
        "root": {"level": level, "handlers": ["stdout"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }


class ExpectedWarnings(logging.Filter):
    """Warnings a library prints of Lethe's own design at every start, which an operator cannot act on: dramatiq's
    "adding a middleware of the same type twice" when a worker process starts its webhook pool, a second Worker on
    the same broker (workers/pools.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.name.startswith("dramatiq.broker")
            and isinstance(record.msg, str)
            and record.msg.startswith("You're adding a middleware of the same type twice")
            and "_WorkerMiddleware" in record.getMessage()
        )


def setup_logging(role: str, fmt: str = "json", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Configure the root logger once for a process: one line a record on stdout (or the given stream)."""
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(make_formatter(fmt))
    handler.addFilter(RoleFilter(role))
    handler.addFilter(SensitiveFieldFilter())
    handler.addFilter(ExpectedWarnings())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    quiet_libraries()


# libvips says about 17 INFO lines an image ("VIPS: shrinkh by 3") through the pyvips logger.
NOISY_LIBRARIES = ("pika", "urllib3", "minio", "werkzeug", "apscheduler", "yoyo", "psycopg.pool", "pyvips")


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
