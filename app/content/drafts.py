"""Drafts (D3): a user's unsent text and file ids. File ids are checked in form and count only: a draft
may name any id, even another person's file (it protects only its owner's files from the cleanup, D8 b)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.db import drafts as sql
from app.db.drafts import DraftRow
from app.domain import access
from app.domain.access import Principal
from app.errors import Forbidden, Invalid

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime


def list_drafts(rt: Runtime, principal: Principal) -> list[DraftRow]:
    """The caller's drafts."""
    if not access.may_read(principal):
        raise Forbidden("files:read")
    return rt.db.read(lambda conn: sql.drafts_of(conn, principal.id))


def put_draft(rt: Runtime, principal: Principal, key: str, text: str, file_ids: Sequence[uuid.UUID]) -> DraftRow:
    """Save the caller's draft by its key; its file ids are checked in form and count only (D3)."""
    if not access.may_write(principal):
        raise Forbidden("files:write")
    unique = list(dict.fromkeys(file_ids))
    if len(unique) > rt.limits.max_attachments:
        raise Invalid("too_many_attachments")
    now = rt.clock.now()
    return rt.db.unit_of_work(
        lambda uow: sql.upsert_draft(uow.conn, principal.id, key, text, unique, now), name="draft.put"
    )


def delete_draft(rt: Runtime, principal: Principal, key: str) -> None:
    """Remove the caller's draft (a missing draft is removed too)."""
    if not access.may_write(principal):
        raise Forbidden("files:write")
    rt.db.unit_of_work(lambda uow: sql.delete_draft(uow.conn, principal.id, key), name="draft.delete")
