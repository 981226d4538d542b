"""Files (D13): show a file, download its content, delete it, and restore a retired one (D16)."""

from __future__ import annotations

import uuid

from typing import Any

import dataclasses

from flask import Response
from flask.views import MethodView
from flask_smorest import Blueprint

from app.content import files
from app.lifecycle import deletion, retention
from app.api.common import caller, problems, runtime
from app.api.schemas import BatchDeleteResultsSchema, BatchDeleteSchema, FileSchema
from app.domain.uploads import content_disposition

blp = Blueprint("files", __name__, url_prefix="/api/v1/files", description="Files")


@blp.route("/<uuid:file_id>")
class FileById(MethodView):
    @blp.doc(operationId="getFile")
    @blp.response(200, FileSchema)
    @problems(blp, 403, 404)
    def get(self, file_id: uuid.UUID) -> Any:
        """A file visible to the caller (its uploader, or `manage`)."""
        return files.visible_file(runtime(), caller(), file_id)

    @blp.doc(operationId="deleteFile")
    @blp.response(204)
    @problems(blp, 403, 404, 409)
    def delete(self, file_id: uuid.UUID) -> Any:
        """deleteFile: delete an unattached file: the caller's own with `files:write`, or, with `manage` and
        `files:write`, any uploader's (its receipt then says `via: manager`, naming nobody). Its objects and row
        are purged. An attached file answers 409 `file_attached` (delete the message instead); avatars,
        branding and exports 409 `purpose_not_deletable`. Unknown, foreign, deleted and purged ids get the same
        404 (a repeated delete too)."""
        deletion.delete_file(runtime(), caller(), file_id)


@blp.route("/batch-delete")
class FilesBatchDelete(MethodView):
    @blp.doc(operationId="batchDeleteFiles")
    @blp.arguments(BatchDeleteSchema)
    @blp.response(200, BatchDeleteResultsSchema)
    @problems(blp, 403, 422)
    def post(self, body: dict[str, Any]) -> Any:
        """Delete up to 1,000 of the caller's files at once (`files:write`). Every id gets the answer
        deleteFile would give it alone, in request order: 204 (deleted now), 404 `not_found` (the same for an
        unknown id, another's file, and one deleted before or purged), 409 `file_attached` or
        `purpose_not_deletable`. One transaction for the batch, one purge job for what it deleted."""
        results = deletion.delete_files(runtime(), caller(), body["ids"])
        return {"results": [dataclasses.asdict(result) for result in results]}


@blp.route("/<uuid:file_id>/content")
class FileContent(MethodView):
    @blp.doc(responses={"200": {"description": "The original, as an attachment.", "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}})
    @blp.doc(operationId="getFileContent")
    @problems(blp, 403, 404, 410)
    def get(self, file_id: uuid.UUID) -> Any:
        """Download the original of a deliverable file (complete, scanned clean or not scanned)."""
        row, size, chunks = files.open_content(runtime(), caller(), file_id)
        response = Response(chunks, mimetype="application/octet-stream", direct_passthrough=True)
        response.headers["Content-Length"] = str(size)
        response.headers["Content-Disposition"] = content_disposition(row.original_name)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "private, no-store"
        response.call_on_close(chunks.close)
        return response


@blp.route("/<uuid:file_id>/restore")
class FileRestore(MethodView):
    @blp.doc(operationId="restoreFile")
    @blp.response(200, FileSchema)
    @problems(blp, 403, 404, 409)
    def post(self, file_id: uuid.UUID) -> Any:
        """Bring back a file a retention policy retired (`manage` only); its age starts again now. A file
        already deleted answers 409 `file_deleted`, a file that is not retired 409 `file_not_retired`."""
        return retention.restore_file(runtime(), caller(), file_id)
