"""Slots (D16): a principal's avatar and the branding logo. Setting a different file deletes the previous one
(then it is purged); clearing deletes the current one."""

from __future__ import annotations

import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import SlotPutSchema, SlotSchema
from app.content import slots

blp = Blueprint("slots", __name__, url_prefix="/api/v1", description="Avatar and logo slots")


@blp.route("/principals/<uuid:principal_id>/avatar")
class Avatar(MethodView):
    @blp.doc(operationId="getAvatar")
    @blp.response(200, SlotSchema)
    @problems(blp, 403, 404)
    def get(self, principal_id: uuid.UUID) -> Any:
        """The file in the principal's avatar slot (the principal itself or `manage`); 404 when empty."""
        return {"file_id": slots.slot_file(runtime(), caller(), "avatar", principal_id)}

    @blp.doc(operationId="putAvatar")
    @blp.arguments(SlotPutSchema)
    @blp.response(200, SlotSchema)
    @problems(blp, 403, 409, 422)
    def put(self, body: dict[str, Any], principal_id: uuid.UUID) -> Any:
        """Set the avatar: the principal itself (files:write) or `manage`. The file must be the principal's
        own, purpose `avatar`, complete and deliverable, else 409 `file_not_available`, `wrong_purpose` or
        `file_not_deliverable`. The file it replaces is deleted (then purged); the same file again deletes
        nothing."""
        return {"file_id": slots.set_slot(runtime(), caller(), "avatar", principal_id, body["file_id"])}

    @blp.doc(operationId="deleteAvatar")
    @blp.response(204)
    @problems(blp, 403)
    def delete(self, principal_id: uuid.UUID) -> Any:
        """Clear the avatar slot and delete its file."""
        slots.clear_slot(runtime(), caller(), "avatar", principal_id)


@blp.route("/branding/logo")
class Logo(MethodView):
    @blp.doc(operationId="getLogo")
    @blp.response(200, SlotSchema)
    @problems(blp, 403, 404)
    def get(self) -> Any:
        """The file in the logo slot; 404 when empty."""
        return {"file_id": slots.slot_file(runtime(), caller(), "logo", None)}

    @blp.doc(operationId="putLogo")
    @blp.arguments(SlotPutSchema)
    @blp.response(200, SlotSchema)
    @problems(blp, 403, 409, 422)
    def put(self, body: dict[str, Any]) -> Any:
        """Set the logo (`manage` only): a `branding` file of the caller's, complete and deliverable. The file
        it replaces is deleted."""
        return {"file_id": slots.set_slot(runtime(), caller(), "logo", None, body["file_id"])}

    @blp.doc(operationId="deleteLogo")
    @blp.response(204)
    @problems(blp, 403)
    def delete(self) -> Any:
        """Clear the logo slot and delete its file (`manage` only)."""
        slots.clear_slot(runtime(), caller(), "logo", None)
