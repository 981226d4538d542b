"""Legal holds, `manage` only."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import HoldListSchema, HoldRequestSchema, HoldSchema, HoldsQuerySchema
from app.lifecycle import holds

blp = Blueprint("holds", __name__, url_prefix="/api/v1/holds", description="Legal holds")


@blp.route("")
class Holds(MethodView):
    @blp.doc(operationId="placeHold")
    @blp.arguments(HoldRequestSchema)
    @blp.response(201, HoldSchema)
    @problems(blp, 403, 404, 422)
    def post(self, body: dict[str, Any]) -> Any:
        """Suspend the purge of a subject's files (every file they uploaded, now and later) or of one file,
        for a legal claim. Users see no difference: their deletions answer as always and a deleted file is
        gone for every reader; its objects and row stay until the release. An erasure of a held subject
        answers 409 `subject_on_hold`. 404 for a file with no row."""
        return holds.place_hold(
            runtime(), caller(), body["case_ref"], subject_id=body.get("subject_id"), file_id=body.get("file_id")
        )

    @blp.doc(operationId="listHolds")
    @blp.arguments(HoldsQuerySchema, location="query")
    @blp.response(200, HoldListSchema)
    @problems(blp, 403, 422)
    def get(self, query: dict[str, Any]) -> Any:
        """Holds in force and released ones (kept for `privacy.receipt_ttl`), in the order they were placed."""
        rows = holds.list_holds(runtime(), caller(), query.get("after"), query["limit"])
        return {
            "holds": [dataclasses.asdict(row) for row in rows],
            "next_after": rows[-1].id if len(rows) == query["limit"] else None,
        }


@blp.route("/<uuid:hold_id>")
class HoldById(MethodView):
    @blp.doc(operationId="getHold")
    @blp.response(200, HoldSchema)
    @problems(blp, 403, 404)
    def get(self, hold_id: uuid.UUID) -> Any:
        """The hold, in force or released."""
        return dataclasses.asdict(holds.hold_of(runtime(), caller(), hold_id))

    @blp.doc(operationId="releaseHold")
    @blp.response(204)
    @problems(blp, 403, 404)
    def delete(self, hold_id: uuid.UUID) -> Any:
        """Release the hold: every file it deferred and no other hold covers is purged within one cleanup
        interval, and its receipt records the deferral. Releasing a released hold changes nothing (204)."""
        holds.release_hold(runtime(), caller(), hold_id)
        return None
