"""Events (D13): the caller's events in order, with a cursor."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import EventListSchema, EventsQuerySchema
from app.content import events
from app.domain import access
from app.errors import Forbidden

blp = Blueprint("events", __name__, url_prefix="/api/v1/events", description="Events")


@blp.route("")
class Events(MethodView):
    @blp.doc(operationId="listEvents")
    @blp.arguments(EventsQuerySchema, location="query")
    @blp.response(200, EventListSchema)
    @problems(blp, 403, 422)
    def get(self, query: dict[str, Any]) -> Any:
        """The caller's events with id > after, oldest first. A deleted file's events stay, redacted."""
        principal = caller()
        if not access.may_read(principal):
            raise Forbidden("files:read")
        rows = events.list_events(runtime().db, principal.id, query["after"], query["limit"])
        items = [
            {
                "id": row.id,
                "type": row.type,
                "schema_version": row.schema_version,
                "resource_kind": row.resource_kind,
                "resource_id": row.resource_id,
                "actor_id": row.actor_id,
                "created_at": row.created_at,
                "redacted": row.redacted_at is not None,
                "payload": row.payload,
            }
            for row in rows
        ]
        return {"events": items, "next_after": items[-1]["id"] if items else query["after"]}
