"""Keyset paging of candidate queries (STYLE.md: loop in chunks): a position is (time, id)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

Cursor = tuple[datetime, UUID] | None  # keyset position of a candidate query: (time, id)


def after(cursor: Cursor, column: str, id_column: str = "id") -> tuple[str, tuple[Any, ...]]:
    """The clause and parameters that continue a (time, id) ordered query after a cursor (STYLE.md: loop in
    chunks)."""
    if cursor is None:
        return "", ()
    return f" AND ({column}, {id_column}) > (%s, %s)", cursor
