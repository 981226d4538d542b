"""Drafts (D13): the caller's unsent text and file ids."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime, segment
from app.api.schemas import DraftListSchema, DraftPutSchema, DraftSchema
from app.content import drafts
from app.db.drafts import DraftRow

blp = Blueprint("drafts", __name__, url_prefix="/api/v1/drafts", description="Drafts")


def shape(row: DraftRow) -> dict[str, Any]:
    """A draft as the API answers it."""
    return {"key": row.draft_key, "text": row.body, "file_ids": row.file_ids, "updated_at": row.updated_at}


@blp.route("")
class Drafts(MethodView):
    @blp.doc(operationId="listDrafts")
    @blp.response(200, DraftListSchema)
    @problems(blp, 403)
    def get(self) -> Any:
        """The caller's drafts."""
        return {"drafts": [shape(row) for row in drafts.list_drafts(runtime(), caller())]}


@blp.route("/<segment:key>")
class DraftByKey(MethodView):
    @blp.doc(operationId="putDraft")
    @blp.arguments(DraftPutSchema)
    @blp.response(200, DraftSchema)
    @problems(blp, 403, 422)
    def put(self, body: dict[str, Any], key: str) -> Any:
        """Save a draft. File ids are checked in form and count only: a draft may name any id."""
        segment(key, "invalid_draft_key")
        return shape(drafts.put_draft(runtime(), caller(), key, body["text"], body["file_ids"]))

    @blp.doc(operationId="deleteDraft")
    @blp.response(204)
    @problems(blp, 403, 422)
    def delete(self, key: str) -> Any:
        """Remove a draft (a missing draft is removed)."""
        segment(key, "invalid_draft_key")
        drafts.delete_draft(runtime(), caller(), key)
