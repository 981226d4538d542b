"""Durations as operators write them (`90s`, `15m`, `24h`, `7d`, `250ms`). Pure."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | int | float | timedelta) -> float:
    """Parse `90s`, `15m`, `24h`, `7d` (or `250ms`) into seconds.

    Raises:
        ValueError: the text is not a duration (the message never repeats it).
    """
    if isinstance(text, bool):
        raise ValueError("not a duration")
    if isinstance(text, timedelta):
        return text.total_seconds()
    if isinstance(text, (int, float)):
        return float(text)
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError("not a duration")
    return int(match.group(1)) * _DURATION_UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest exact spelling of a duration, for docs and `config show`."""
    for unit in ("d", "h", "m", "s"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds * 1000)}ms"
