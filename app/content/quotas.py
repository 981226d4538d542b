"""Quotas: reserved before the first byte, freed when the bytes go (the rules: app/domain/quotas.py).

A new upload reserves its declared size by the insert of its rows: the database counts it at once and holds the
principal's counters locked until the transaction ends, in every api process alike. `reserve` then reads the
limits and those counters in the same transaction and refuses what does not fit: the transaction rolls back,
so a refused request leaves no row, and the multipart upload begun in the store for it (S3) is aborted at once,
before it held a byte. What a principal holds is counted by
the database with each change of a file's row, so completion, abort, expiry, failure, blocking and the purge's
removal of the row all move it in the transaction that commits them; `drift` checks the counters against the
rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.db import quotas as quotas_sql
from app.db.conn import Conn
from app.db.quotas import DriftRow, Waiting
from app.domain import access
from app.domain.access import Principal
from app.domain.quotas import FIELDS, Held, Limit, Quota, Refusal, effective, refusal, without
from app.domain.states import PURPOSES
from app.domain.uploads import human_size
from app.errors import Forbidden, Invalid, NotFound, QuotaExceeded

if TYPE_CHECKING:
    from app.runtime import Runtime


@dataclass(frozen=True)
class Usage:
    """What a principal holds and may hold: per purpose and in all, with the deleted files it still holds."""

    principal_id: uuid.UUID
    document: dict[str, Any] | None  # the principal's own limits; None: the defaults alone
    quota: Quota
    everything: Held  # what all its files hold
    held: dict[str, Held]  # per purpose
    waiting: Waiting


def _check(quota: Quota, everything: Held, own: Held, purpose: str, size_bytes: int) -> None:
    refused = refusal(quota, everything, own, purpose, size_bytes)
    if refused is not None:
        raise QuotaExceeded(_detail(refused), refused.body())


def _detail(refused: Refusal) -> str:
    what = "all your files" if refused.purpose is None else f"your files of purpose {refused.purpose}"
    if refused.limit.files is not None and refused.held.files + 1 > refused.limit.files:
        return f"This upload would pass the quota of {what}: at most {refused.limit.files} files."
    assert refused.limit.bytes is not None
    return f"This upload would pass the quota of {what}: at most {human_size(refused.limit.bytes)}."


def reserve(conn: Conn, default: Limit, principal_id: uuid.UUID, purpose: str, size_bytes: int) -> None:
    """Right after the insert of a new upload's rows, in their transaction (the insert reserved its size and
    holds the principal's counters): refuse it when it does not fit. One statement, whether a quota applies or not.

    Raises:
        QuotaExceeded: it does not fit; the caller's transaction rolls back, and nothing it wrote stays.
    """
    seen = quotas_sql.standing(conn, principal_id, purpose)
    quota = effective(seen.limits, default)
    if quota.limits:
        _check(quota, without(seen.everything, size_bytes), without(seen.of_purpose, size_bytes), purpose, size_bytes)


def usage(rt: Runtime, caller: Principal | None, principal_id: uuid.UUID) -> Usage:
    """A principal's usage and limits (the principal itself, `manage`, or an operator's command: None).

    Raises:
        NotFound: another principal's, to a caller who may not see it (the same answer as any id).
    """
    if not access.sees_usage(caller, principal_id):
        raise NotFound()
    default = rt.limits.quota

    def read(conn: Conn) -> Usage:
        row = quotas_sql.quota_of(conn, principal_id)
        held = {usage.purpose: usage.held for usage in quotas_sql.usage_of(conn, principal_id)}
        everything = held.pop(quotas_sql.ALL, Held())
        document = row.limits if row else None
        waiting = quotas_sql.waiting_of(conn, principal_id)
        return Usage(principal_id, document, effective(document, default), everything, held, waiting)

    return rt.db.read(read)


def set_quota(rt: Runtime, caller: Principal | None, principal_id: uuid.UUID, document: dict[str, Any]) -> Usage:
    """Replace a principal's own limits (`manage`, or an operator's command). Lowering a limit below what the
    principal holds refuses its next uploads and takes nothing away.

    Raises:
        Forbidden: no `manage`. Invalid: `purpose_unknown`.
    """
    if not access.may_set_quota(caller):
        raise Forbidden("manage")
    unknown = set(document.get("purposes") or {}) - set(PURPOSES)
    if unknown:
        raise Invalid("purpose_unknown", f"Purposes are {', '.join(PURPOSES)}.")
    kept = {name: document[name] for name in FIELDS if name in document}
    if document.get("purposes"):
        kept["purposes"] = {
            purpose: {name: values[name] for name in FIELDS if name in values}
            for purpose, values in document["purposes"].items()
        }
    now = rt.clock.now()
    rt.db.unit_of_work(lambda uow: quotas_sql.set_quota(uow.conn, principal_id, kept, now), name="quota.set")
    return usage(rt, None, principal_id)


def drift(rt: Runtime, limit: int = 100) -> list[DriftRow]:
    """Principals and purposes whose recorded usage differs from their rows (none, unless the counting triggers
    were bypassed: rows written with triggers disabled, a partial restore)."""
    return rt.db.read(lambda conn: quotas_sql.drift(conn, limit))


def recount(rt: Runtime) -> bool:
    """Count every principal's usage again from the rows (`lethe quota check --repair`): writes to files wait for
    the count, a moment per hundred thousand rows. Returns True."""
    rt.db.unit_of_work(lambda uow: quotas_sql.recount(uow.conn), name="quota.recount")
    return True


def shown(usage: Usage) -> dict[str, Any]:
    """A principal's usage as the API and `lethe quota show` answer it."""

    def counts(held: Held, limit: Limit) -> dict[str, Any]:
        return {
            "bytes": {"used": held.used_bytes, "reserved": held.reserved_bytes, "limit": limit.bytes},
            "files": {"used": held.used_files, "reserved": held.reserved_files, "limit": limit.files},
        }

    return {
        "principal_id": usage.principal_id,
        **counts(usage.everything, usage.quota.all),
        "awaiting_purge": {"bytes": usage.waiting.bytes, "files": usage.waiting.files},
        "held_by_holds": {"bytes": usage.waiting.held_bytes, "files": usage.waiting.held_files},
        "purposes": {
            purpose: counts(usage.held.get(purpose, Held()), usage.quota.of(purpose))
            for purpose in PURPOSES
            if purpose in usage.held or usage.quota.of(purpose).limits
        },
        "quota": usage.document,
    }
