"""Quotas (D21): what one principal may hold, in bytes and files, in all and per purpose. Pure.

A principal's own limits are a document set by a manage token: `max_bytes` and `max_files` for all of its files,
and the same per purpose under `purposes`. A limit left out of the document is the installation's default
(quotas.default_bytes, quotas.default_files; none by default); a null one is no limit. Purposes have no
default: a purpose is limited only where the document limits it.

What a principal holds is counted by the database with every change of a file's row: an upload in progress
reserves its declared size, a complete file that is not blocked uses its size until its row is removed (after
the purge), a failed or blocked file holds nothing. A new upload fits when what was held before it plus what it
reserves stays within every limit that applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FIELDS = ("max_bytes", "max_files")


@dataclass(frozen=True)
class Limit:
    """The most bytes and files; None: no limit on that count."""

    bytes: int | None = None
    files: int | None = None

    @property
    def limits(self) -> bool:
        """Whether it limits anything."""
        return self.bytes is not None or self.files is not None


NO_LIMIT = Limit()


@dataclass(frozen=True)
class Held:
    """Bytes and files held: reserved by uploads in progress, used by complete files."""

    reserved_bytes: int = 0
    reserved_files: int = 0
    used_bytes: int = 0
    used_files: int = 0

    @property
    def bytes(self) -> int:
        """Bytes held, reserved and used."""
        return self.reserved_bytes + self.used_bytes

    @property
    def files(self) -> int:
        """Files held, reserved and used."""
        return self.reserved_files + self.used_files


@dataclass(frozen=True)
class Quota:
    """A principal's limits: in all, and per purpose (a purpose not named is not limited on its own)."""

    all: Limit = NO_LIMIT
    purposes: Mapping[str, Limit] = field(default_factory=dict)

    def of(self, purpose: str) -> Limit:
        """The limit of one purpose's files alone (none when the document names none)."""
        return self.purposes.get(purpose, NO_LIMIT)

    @property
    def limits(self) -> bool:
        """Whether any limit applies."""
        return self.all.limits or any(limit.limits for limit in self.purposes.values())


def effective(document: Mapping[str, Any] | None, default: Limit) -> Quota:
    """The limits that apply to a principal: its own document's, the default where it leaves one out."""
    document = document or {}
    purposes = {
        purpose: Limit(values.get("max_bytes"), values.get("max_files"))
        for purpose, values in (document.get("purposes") or {}).items()
    }
    return Quota(
        Limit(
            document["max_bytes"] if "max_bytes" in document else default.bytes,
            document["max_files"] if "max_files" in document else default.files,
        ),
        purposes,
    )


@dataclass(frozen=True)
class Refusal:
    """Why a reservation does not fit: the limit it would pass (in all, or of a purpose), what is held, and
    what the upload asked for. Counts only: it names no file."""

    purpose: str | None  # None: the limit of all the principal's files
    limit: Limit
    held: Held
    size_bytes: int

    def body(self) -> dict[str, Any]:
        """The fields of the 413 problem document."""
        return {
            "quota": {
                "purpose": self.purpose,
                "limit": {"bytes": self.limit.bytes, "files": self.limit.files},
                "usage": {"bytes": self.held.bytes, "files": self.held.files},
                "reservation": {"bytes": self.size_bytes, "files": 1},
            }
        }


def _passes(limit: Limit, held: Held, size_bytes: int) -> bool:
    return (limit.bytes is not None and held.bytes + size_bytes > limit.bytes) or (
        limit.files is not None and held.files + 1 > limit.files
    )


def refusal(quota: Quota, everything: Held, own: Held, purpose: str, size_bytes: int) -> Refusal | None:
    """None when a new file of `size_bytes` for `purpose` fits every limit that applies, given what all the
    principal's files and those of the purpose hold without it; else why it does not (the limit of all files
    first, then the purpose's)."""
    if _passes(quota.all, everything, size_bytes):
        return Refusal(None, quota.all, everything, size_bytes)
    if _passes(quota.of(purpose), own, size_bytes):
        return Refusal(purpose, quota.of(purpose), own, size_bytes)
    return None


def without(held: Held, size_bytes: int) -> Held:
    """What was held before one upload of `size_bytes` reserved its size."""
    return Held(held.reserved_bytes - size_bytes, held.reserved_files - 1, held.used_bytes, held.used_files)
