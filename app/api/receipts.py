"""Deletion receipts (D16), `manage` only."""

from __future__ import annotations

import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import ReceiptSchema
from app.lifecycle import receipts

blp = Blueprint("receipts", __name__, url_prefix="/api/v1/receipts", description="Deletion receipts")


@blp.route("/<uuid:file_id>")
class ReceiptById(MethodView):
    @blp.doc(operationId="getReceipt")
    @blp.response(200, ReceiptSchema)
    @problems(blp, 403, 404)
    def get(self, file_id: uuid.UUID) -> Any:
        """The name-free receipt of a purged file: how and when it was deleted, when its row went, and how
        many keys were deleted and confirmed absent. 404 until the file is purged (and after
        `privacy.receipt_ttl`)."""
        return receipts.receipt_of(runtime(), caller(), file_id)
