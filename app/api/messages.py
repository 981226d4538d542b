"""Messages (D13): attach files to the application's messages."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime, segment
from app.api.schemas import MessageDeleteQuerySchema, MessagePutSchema, MessageSchema
from app.content import attachments
from app.lifecycle import deletion

blp = Blueprint("messages", __name__, url_prefix="/api/v1/messages", description="Messages and attachments")


@blp.route("/<segment:message_id>")
class MessageById(MethodView):
    @blp.doc(operationId="putMessage")
    @blp.arguments(MessagePutSchema)
    @blp.response(200, MessageSchema)
    @problems(blp, 403, 404, 409, 422)
    def put(self, body: dict[str, Any], message_id: str) -> Any:
        """Record the message (the caller is its author; ids are scoped by author, so another user's message
        with the same id is a different message) and attach the files. Each must be the caller's,
        deliverable, not deleted and not attached: else 409 `file_not_attachable` and nothing is attached."""
        segment(message_id, "invalid_message_id")
        message, attached = attachments.put_message(runtime(), caller(), message_id, body["file_ids"])
        return {
            "id": message.id,
            "author_id": message.author_id,
            "created_at": message.created_at,
            "file_ids": attached,
        }

    @blp.doc(operationId="deleteMessage")
    @blp.arguments(MessageDeleteQuerySchema, location="query")
    @blp.response(204)
    @problems(blp, 403, 404, 422)
    def delete(self, query: dict[str, Any], message_id: str) -> Any:
        """Delete the caller's message: its attachments go and every attached file is deleted, then purged.
        Deleting it again answers 204. Message ids are scoped by author; `manage` names another author with
        `author_id`."""
        segment(message_id, "invalid_message_id")
        deletion.delete_message(runtime(), caller(), message_id, query.get("author_id"))
