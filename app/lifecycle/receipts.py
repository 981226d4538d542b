"""Deletion receipts (D16): read by `manage`. They are written by the purge with the row delete."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from app.db import receipts as sql
from app.db.receipts import ReceiptRow
from app.domain import access
from app.domain.access import Principal
from app.errors import Forbidden, NotFound

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime


def receipt_of(rt: Runtime, principal: Principal | None, file_id: uuid.UUID) -> ReceiptRow:
    """The receipt of a purged file (`manage`; principal None: an operator's command).

    Raises:
        Forbidden: the caller lacks `manage`. NotFound: no receipt (not purged yet, unknown, or expired).
    """
    if not access.may_read_receipt(principal):
        raise Forbidden("manage")
    row = rt.db.read(lambda conn: sql.receipt_of(conn, file_id))
    if row is None:
        raise NotFound()
    return row
