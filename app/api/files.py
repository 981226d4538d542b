"""Files (D13): show a file, download its content, delete it, and restore a retired one (D16)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from flask import request
from flask.views import MethodView
from flask_smorest import Blueprint

from app.api import serving
from app.api.common import caller, problems, runtime
from app.api.limits import rate_limited
from app.api.schemas import (
    BatchDeleteResultsSchema,
    BatchDeleteSchema,
    ContentQuerySchema,
    FileListSchema,
    FileSchema,
    FilesQuerySchema,
    LinkCreateSchema,
    LinkSchema,
)
from app.content import files, serve
from app.lifecycle import deletion, retention

blp = Blueprint("files", __name__, url_prefix="/api/v1/files", description="Files")


@blp.route("")
class FileList(MethodView):
    @blp.doc(operationId="listFiles")
    @blp.arguments(FilesQuerySchema, location="query")
    @blp.response(200, FileListSchema)
    @problems(blp, 403, 422)
    def get(self, query: dict[str, Any]) -> Any:
        """The caller's own live files, newest first, a page at a time (`files:read`); by `purpose` and upload
        `state` when given. With `manage`, another uploader's (`uploader`), retired ones included. Deleted
        files never appear."""
        rows, cursor = files.list_files(
            runtime(),
            caller(),
            query.get("uploader"),
            query.get("purpose"),
            query.get("state"),
            query.get("after"),
            query["limit"],
        )
        return {"files": rows, "next": cursor}


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
    @rate_limited(blp, "batch_deletes")
    def post(self, body: dict[str, Any]) -> Any:
        """Delete up to 1,000 of the caller's files at once (`files:write`). Every id gets the answer
        deleteFile would give it alone, in request order: 204 (deleted now), 404 `not_found` (the same for an
        unknown id, another's file, and one deleted before or purged), 409 `file_attached` or
        `purpose_not_deletable`. One transaction for the batch, one purge job for what it deleted."""
        results = deletion.delete_files(runtime(), caller(), body["ids"])
        return {"results": [dataclasses.asdict(result) for result in results]}


BYTES = {"schema": {"type": "string", "format": "binary"}}
CONTENT_RESPONSES = {
    "200": {
        "description": "The whole file.",
        "content": {"application/octet-stream": BYTES, "image/*": BYTES, "audio/*": BYTES, "video/*": BYTES},
    },
    "206": {
        "description": "One byte range (Range: bytes=first-last).",
        "content": {"application/octet-stream": BYTES, "image/*": BYTES, "audio/*": BYTES, "video/*": BYTES},
    },
    "302": {"description": "file.s3.download redirect: a presigned GET of the store, short-lived."},
    "304": {"description": "If-None-Match or If-Modified-Since: the client's copy is current."},
}


@blp.route("/<uuid:file_id>/content")
class FileContent(MethodView):
    @blp.doc(responses=CONTENT_RESPONSES, operationId="getFileContent")
    @blp.arguments(ContentQuerySchema, location="query")
    @problems(blp, 403, 404, 410, 412, 416, 422)
    def get(self, query: dict[str, Any], file_id: uuid.UUID) -> Any:
        """Download the original of a deliverable file (complete, scanned clean or not scanned), whole or one
        byte range, with a strong ETag and Last-Modified for conditional requests; HEAD answers the headers.
        `disposition=inline` shows it in the browser when its bytes are a raster image, audio or video of the
        type it was declared as; anything else is an attachment of application/octet-stream."""
        return serving.respond(runtime(), serve.for_reader(runtime(), caller(), file_id, query["disposition"]))


@blp.route("/<uuid:file_id>/variants/<string:name>")
class FileVariant(MethodView):
    @blp.doc(responses=CONTENT_RESPONSES, operationId="getFileVariant")
    @blp.arguments(ContentQuerySchema, location="query")
    @problems(blp, 403, 404, 410, 412, 416, 422)
    def get(self, query: dict[str, Any], file_id: uuid.UUID, name: str) -> Any:
        """Download one image variant of a deliverable file (`thumb-small`, `thumb-large`, `preview`, or
        `poster` for an animation; the File document's `thumbnails` lists those ready): WebP without any
        metadata, with everything getFileContent answers (ranges, validators, HEAD, inline). 404 for a name
        the file has no variant of."""
        return serving.respond(
            runtime(), serve.for_reader(runtime(), caller(), file_id, query["disposition"], variant=name)
        )


@blp.route("/<uuid:file_id>/links")
class FileLinks(MethodView):
    @blp.doc(operationId="createFileLink")
    @blp.arguments(LinkCreateSchema)
    @blp.response(201, LinkSchema)
    @problems(blp, 403, 404, 410, 422, 501)
    @rate_limited(blp, "links")
    def post(self, body: dict[str, Any], file_id: uuid.UUID) -> Any:
        """A link to the file that works without an Authorization header (an `<img src>`, a `<video src>`, a
        download), for at most file.link_ttl (`files:read` on a file the caller may read). It is sealed to
        the file, disposition and expiry and names none of them; every use checks the file again, so a link
        of a deleted file answers 404 at once."""
        rt = runtime()
        token, expires_at = serve.create_link(
            rt, caller(), file_id, body["disposition"], body.get("variant"), body.get("ttl")
        )
        base = rt.cfg.api.public_url.rstrip("/") or request.host_url.rstrip("/")
        return {"url": f"{base}/api/v1/links/{token}", "expires_at": expires_at}


@blp.route("/<uuid:file_id>/restore")
class FileRestore(MethodView):
    @blp.doc(operationId="restoreFile")
    @blp.response(200, FileSchema)
    @problems(blp, 403, 404, 409)
    def post(self, file_id: uuid.UUID) -> Any:
        """Bring back a file a retention policy retired (`manage` only); its age starts again now. A file
        already deleted answers 409 `file_deleted`, a file that is not retired 409 `file_not_retired`."""
        return retention.restore_file(runtime(), caller(), file_id)
