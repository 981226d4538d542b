"""The one way Lethe logs an event (D15).

    log_event(log, "info", "purge.done", "purge done", files=12, duration_s=0.4)

An event has a name, a human message and counted fields: counts, durations, ids, codes and step names. This
is where the canary rules live: a field named like a name, key, digest, token or secret is blanked (a bug,
so a test fails on it through the canary tests); an exception passed as a field becomes its type (and
its store code or SQLSTATE), never its text; a value that is not a scalar or a list of scalars is withheld.
Tracebacks are rendered by the formatters without exception messages (app.platform.observability).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from app.platform.observability import REDACTED, SENSITIVE_FIELDS

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
          "exception": logging.ERROR}
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
