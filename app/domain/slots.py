"""Slots (D16): which file may sit in a slot. Pure."""

from __future__ import annotations

import uuid
from typing import Any

from app.domain.states import is_deliverable

SLOT_PURPOSE = {"avatar": "avatar", "logo": "branding"}


def refusal(kind: str, row: Any, owner_id: uuid.UUID) -> str | None:
    """Why a file cannot go into a slot of `kind` held for `owner_id`, as a 409 reason; None when it can.

    An unknown, deleted, retired or someone else's file gets the same reason, `file_not_available`, so an
    answer never tells whether someone else's id exists.
    """
    if row is None or row.deleted_at is not None or row.retired_at is not None or row.uploaded_by != owner_id:
        return "file_not_available"
    if row.purpose != SLOT_PURPOSE[kind]:
        return "wrong_purpose"
    if not is_deliverable(row.upload_state, row.scan_status):
        return "file_not_deliverable"
    return None
