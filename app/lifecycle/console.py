"""The operator console's sign-in and what its pages read: read-only, ids and counts, never a name, a key or a
digest.

Sign-in without a new identity system: `lethe console` records a one-time link for a principal with `manage`;
using it opens a session (a random cookie value, kept as its SHA-256) that lasts api.console_session_ttl. A
link is single use (its row goes when it is used) and short-lived; a session ends at its expiry or sign-out.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from app.db import cleanup as cleanup_sql
from app.db import console as sql
from app.db import holds as holds_sql
from app.db import purge_failures as failures_sql
from app.db import stores as stores_sql
from app.db.outbox import outbox_depth
from app.domain.access import MANAGE, Principal
from app.platform.jobs.broker import queue_depths
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.lifecycle.journal import RestoreGuard
    from app.runtime import Runtime

log = logging.getLogger("lethe.console")

LINK_TTL_MAX = timedelta(hours=1)
LIST_LIMIT = 100


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class Session:
    """A signed-in operator: the principal (with `manage`), the token the forms carry, and the expiry."""

    principal: Principal
    csrf: str
    expires_at: datetime


def make_link(rt: Runtime, principal_id: uuid.UUID, ttl: timedelta) -> str:
    """Record a one-time sign-in link for a principal; its token (shown once, kept as a digest only).

    Raises:
        ValueError: ttl is not more than 0 or beyond LINK_TTL_MAX.
    """
    if not timedelta(0) < ttl <= LINK_TTL_MAX:
        raise ValueError("a sign-in link lasts more than 0s and at most 1h")
    token = secrets.token_urlsafe(32)
    now = rt.clock.now()
    rt.db.unit_of_work(
        lambda uow: sql.grant(uow.conn, _digest(token), principal_id, now, now + ttl), name="console.link"
    )
    log_event(log, "info", "console.link_made", "console sign-in link made", ttl_s=int(ttl.total_seconds()))
    return token


def link_usable(rt: Runtime, token: str) -> bool:
    """Whether a sign-in link is unused and unexpired (without using it)."""
    return bool(rt.db.read(lambda conn: sql.grant_valid(conn, _digest(token), rt.clock.now())))


def sign_in(rt: Runtime, token: str) -> tuple[str, Session] | None:
    """Use a sign-in link up and open a session: the session's cookie value and the session; None when the link
    is unknown, used or expired."""
    now = rt.clock.now()
    cookie = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(24)
    expires = now + rt.lifecycle.console_session_ttl

    def work(uow: Any) -> uuid.UUID | None:
        principal_id = sql.use_grant(uow.conn, _digest(token), now)
        if principal_id is not None:
            sql.open_session(uow.conn, _digest(cookie), principal_id, csrf, now, expires)
        return principal_id

    principal_id = rt.db.unit_of_work(work, name="console.sign_in")
    if principal_id is None:
        log_event(log, "info", "console.link_refused", "console sign-in link refused")
        return None
    log_event(log, "info", "console.signed_in", "console session opened")
    return cookie, Session(Principal(principal_id, frozenset({MANAGE})), csrf, expires)


def session_of(rt: Runtime, cookie: str | None) -> Session | None:
    """The session of a cookie value, unless there is none or it expired."""
    if not cookie:
        return None
    row = rt.db.read(lambda conn: sql.session(conn, _digest(cookie), rt.clock.now()))
    if row is None:
        return None
    return Session(Principal(row.principal_id, frozenset({MANAGE})), row.csrf, row.expires_at)


def sign_out(rt: Runtime, cookie: str) -> None:
    """End a session."""
    rt.db.unit_of_work(lambda uow: sql.close_session(uow.conn, _digest(cookie)), name="console.sign_out")
    log_event(log, "info", "console.signed_out", "console session closed")


@dataclass
class Overview:
    """What the overview page shows: counts, ages and ids."""

    now: datetime
    backlog: int
    oldest_mark: datetime | None
    purge_failing: int
    oldest_failing: datetime | None
    holds_active: int
    files_held: int
    steps: list[sql.StepRun]
    outbox: int
    queues: dict[str, tuple[int, int, int]] | None
    pending: sql.Pending
    guard_reason: str | None
    journal_position: int | None
    journal_head: int | None
    journal_waiting: int
    keys: dict[str, Any]
    usage: sql.Usage
    stores: list[stores_sql.StoreCounts] = field(default_factory=list)
    migration: stores_sql.Migration | None = None

    def age(self, at: datetime | None) -> str:
        """How long ago, in the largest whole unit ("3h", "12m", "40s"), or "-"."""
        if at is None:
            return "-"
        seconds = max(int((self.now - at).total_seconds()), 0)
        for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if seconds >= size:
                return f"{seconds // size}{unit}"
        return f"{seconds}s"


def overview(rt: Runtime, guard: RestoreGuard | None) -> Overview:
    """Read what the overview shows, each part from the query its own command or gauge uses."""
    from app.lifecycle import keys

    now = rt.clock.now()
    backlog = rt.db.read(cleanup_sql.backlog)
    failing = rt.db.read(failures_sql.failing)
    held = rt.db.read(holds_sql.summary)
    state = guard.state if guard is not None else None
    return Overview(
        now=now,
        backlog=backlog.n,
        oldest_mark=backlog.oldest,
        purge_failing=failing.n,
        oldest_failing=failing.oldest,
        holds_active=held.active,
        files_held=held.files_held,
        steps=rt.db.read(sql.last_steps),
        outbox=rt.db.read(outbox_depth),
        queues=queue_depths(rt.broker),
        pending=rt.db.read(sql.pending),
        guard_reason=guard.reason() if guard is not None else None,
        journal_position=state.position if state is not None else None,
        journal_head=state.head if state is not None else None,
        journal_waiting=rt.db.read(sql.journal_waiting),
        keys=keys.status(rt).as_dict(),
        usage=rt.db.read(sql.usage),
        stores=rt.db.read(lambda conn: stores_sql.counts(conn, now)),
        migration=rt.db.read(stores_sql.latest),
    )


def holds(rt: Runtime) -> list[holds_sql.HoldRow]:
    """The latest holds, in force and released."""
    return rt.db.read(lambda conn: holds_sql.page(conn, None, LIST_LIMIT))


def hold(rt: Runtime, hold_id: uuid.UUID) -> tuple[holds_sql.HoldRow | None, list[sql.HeldFile]]:
    """One hold and the files it covers (the first LIST_LIMIT)."""
    row = rt.db.read(lambda conn: holds_sql.hold(conn, hold_id))
    files = rt.db.read(lambda conn: sql.held_files(conn, hold_id, LIST_LIMIT)) if row is not None else []
    return row, files


def erasures(rt: Runtime) -> list[Any]:
    """The latest erasures."""
    return rt.db.read(lambda conn: sql.erasures(conn, LIST_LIMIT))


def receipts(rt: Runtime) -> list[Any]:
    """The latest receipts."""
    return rt.db.read(lambda conn: sql.receipts(conn, LIST_LIMIT))


def deliveries(rt: Runtime, failed_only: bool) -> list[Any]:
    """The latest webhook deliveries (or the failed ones)."""
    from app.lifecycle import webhooks

    return webhooks.list_deliveries(rt, failed_only=failed_only, limit=LIST_LIMIT)
