"""Erasure of a person (D16), `manage` only."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.limits import rate_limited
from app.api.schemas import ErasureRequestSchema, ErasureSchema
from app.db.erasures import ErasureRow
from app.db.receipts import ReceiptRow
from app.lifecycle import erasure

blp = Blueprint("erasures", __name__, url_prefix="/api/v1/erasures", description="Erasure of a person")


def _shape(row: ErasureRow, receipts: list[ReceiptRow]) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "receipts": [dataclasses.asdict(receipt) for receipt in receipts]}


@blp.route("")
class Erasures(MethodView):
    @blp.doc(operationId="createErasure")
    @blp.arguments(ErasureRequestSchema)
    @blp.response(202, ErasureSchema)
    @problems(blp, 403, 409, 422)
    @rate_limited(blp, "erasures")
    def post(self, body: dict[str, Any]) -> Any:
        """Erase everything Lethe holds of a subject: their files (attached ones too), messages, drafts,
        slots, upload sessions and events. Answers at once; follow the state with getErasure. A second
        request for the same subject while one runs answers the running one. 409 `subject_on_hold` while a
        legal hold covers the subject or one of their files; 422 `subject_reserved` for the all-zero id (the
        installation's own: it holds the logo slot)."""
        rt = runtime()
        row = erasure.request_erasure(rt, caller(), body["subject_id"])
        return _shape(*erasure.erasure_of(rt, caller(), row.id))


@blp.route("/<uuid:erasure_id>")
class ErasureById(MethodView):
    @blp.doc(operationId="getErasure")
    @blp.response(200, ErasureSchema)
    @problems(blp, 403, 404)
    def get(self, erasure_id: uuid.UUID) -> Any:
        """The erasure's state (`running`, `complete`, or `failed` with a reason), its counts, and the
        receipts of the files it purged. `complete` only when no row of the subject is left and every key of
        every file was confirmed absent by a read of the store."""
        return _shape(*erasure.erasure_of(runtime(), caller(), erasure_id))
