"""The one way Lethe logs an event (D15).

    log_event(log, "info", "purge.done", "purge done", files=12, duration_s=0.4)

An event has a name, a human message and counted fields: counts, durations, ids, codes and step names. This
is where the canary rules live: a field named like a name, key, digest, token or secret is blanked (a bug,
so a test fails on it through the canary tests); an exception passed as a field becomes its type (and
its store code or SQLSTATE), never its text; a value that is not a scalar or a list of scalars is withheld.
Tracebacks are rendered without exception messages (format_exception_safely, used by the formatters of
log_setup.py); SensitiveFieldFilter blanks a sensitive field whatever logger it comes through.
"""

from __future__ import annotations

import logging
import re
import traceback
import uuid
from datetime import datetime, timedelta
from typing import Any

# Extra fields that must never reach a log line, whatever a caller passes (D15).
SENSITIVE_FIELDS = frozenset(
    {
        "original_name",
        "file_name",
        "filename_",
        "object_key",
        "key",
        "keys",
        "sha256",
        "digest",
        "token",
        "authorization",
        "password",
        "secret",
        "dsn",
        "url",
        "database_url",
        "broker_url",
        "scope_name",
    }
)
STANDARD_ATTRIBUTES = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
REDACTED = "[redacted]"


_SECRET_SHAPES = re.compile(r"^(?:f/[0-9a-f]{2}/[0-9a-f]{2}/|uploads/)|^[0-9a-fA-F]{40,}$|^eyJ[\w-]*\.[\w-]*\.")


def _is_count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SensitiveFieldFilter(logging.Filter):
    """Blank extra fields by field list and by value shape (D15): a field whose name says it holds a name,
    key, digest, token or secret is blanked unless its value is a number (a count is not a secret: `keys=6`);
    a string shaped like an object key, a digest or a token is blanked under any name."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in list(record.__dict__.items()):
            if name in STANDARD_ATTRIBUTES:
                continue
            if name in SENSITIVE_FIELDS and not _is_count(value):
                setattr(record, name, REDACTED)
            elif isinstance(value, str) and _SECRET_SHAPES.search(value):
                setattr(record, name, REDACTED)
        return True


def format_exception_safely(exc_info: Any) -> str:
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
        lines.append(
            f"{type(exc).__module__}.{type(exc).__qualname__}"
            + (f" (sqlstate {sqlstate})" if isinstance(sqlstate, str) else "")
            + ": [message withheld]"
        )
    return "\n".join(lines)


LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
}
_SCALARS = (int, float, bool, str, type(None))


def describe_error(exc: BaseException) -> str:
    """An exception as a log field: its type, and the store's code or the SQLSTATE when it has one."""
    code = getattr(exc, "store_code", None) or getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}:{code}" if isinstance(code, str) and code else type(exc).__name__


def _field(name: str, value: Any) -> Any:
    if name in SENSITIVE_FIELDS:
        return REDACTED
    if isinstance(value, BaseException):
        return describe_error(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (datetime, timedelta)):
        return str(value)
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(item, _SCALARS) for item in value):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    return "[withheld]"


def log_event(logger: logging.Logger, level: str, event: str, message: str, **fields: Any) -> None:
    """Log one event with counted fields; `level` "exception" adds the traceback (types and frames only)."""
    extra = {"event": event, **{name: _field(name, value) for name, value in fields.items()}}
    logger.log(LEVELS[level], message, extra=extra, exc_info=level == "exception")
