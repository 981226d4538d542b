"""The explainer (`manage` only): why a file is still here, and what ends it."""

from __future__ import annotations

import uuid
from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.schemas import ExplanationSchema
from app.lifecycle import explain

blp = Blueprint("explain", __name__, url_prefix="/api/v1/files", description="Why a file is still here")


@blp.route("/<uuid:file_id>/explain")
class FileExplanation(MethodView):
    @blp.doc(operationId="explainFile")
    @blp.response(200, ExplanationSchema)
    @problems(blp, 403)
    def get(self, file_id: uuid.UUID) -> Any:
        """For any file id: its state (live, deleted, purged or unknown), every rule keeping its bytes now, and
        what ends it and when (or what someone must do first); the receipt of a purged file. Ids, rules and
        times only: never a name, a key or a digest."""
        return explain.explain_file(runtime(), caller(), file_id)
