"""Keyset paging of candidate queries (STYLE.md: loop in chunks): a position is (time, id)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

Cursor = tuple[datetime, UUID] | None  # keyset position of a candidate query: (time, id)


@dataclass(frozen=True)
class Candidate:
    """One row of a candidate query: an id and the time it is ordered by (its keyset position)."""

    id: UUID
    at: datetime


def after(cursor: Cursor, column: str, id_column: str = "id") -> tuple[str, tuple[Any, ...]]:
    """The clause and parameters that continue a (time, id) ordered query after a cursor (STYLE.md: loop in
    chunks)."""
    if cursor is None:
        return "", ()
    return f" AND ({column}, {id_column}) > (%s, %s)", cursor
