"""Principals' quotas and usage: what one principal may hold, and what it holds."""

from __future__ import annotations

import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import QuotaRequestSchema, UsageSchema
from app.content import quotas

blp = Blueprint("principals", __name__, url_prefix="/api/v1/principals", description="Quotas and usage")


@blp.route("/<uuid:principal_id>/quota")
class Quota(MethodView):
    @blp.doc(operationId="setQuota")
    @blp.arguments(QuotaRequestSchema)
    @blp.response(200, UsageSchema)
    @problems(blp, 403, 422)
    def put(self, body: dict[str, Any], principal_id: uuid.UUID) -> Any:
        """Give a principal limits of its own (`manage`), replacing any it had; answers its usage under them.
        A lower limit than what it holds takes nothing away: its next uploads are refused (413 quota_exceeded)."""
        return quotas.shown(quotas.set_quota(runtime(), caller(), principal_id, body))


@blp.route("/<uuid:principal_id>/usage")
class Usage(MethodView):
    @blp.doc(operationId="getUsage")
    @blp.response(200, UsageSchema)
    @problems(blp, 404)
    def get(self, principal_id: uuid.UUID) -> Any:
        """What a principal holds and may hold, in all and per purpose: bytes and files used by complete files,
        reserved by uploads in progress, and its limits; the deleted files it still holds until their purge, and
        those a legal hold keeps. The principal itself or `manage`; another principal's is 404."""
        return quotas.shown(quotas.usage(runtime(), caller(), principal_id))
