"""Uploads (D13): create, put parts, complete, show, abort."""

from __future__ import annotations

import uuid
from typing import Any

from flask import request
from flask.views import MethodView
from flask_smorest import Blueprint

from app.api.common import caller, problems, runtime
from app.api.limits import rate_limited
from app.api.schemas import FileSchema, PartSchema, PartUrlSchema, UploadCreateSchema, UploadViewSchema
from app.content import direct, uploads
from app.content.sessions import Upload
from app.errors import UnsupportedMediaType

blp = Blueprint("uploads", __name__, url_prefix="/api/v1/uploads", description="Resumable uploads")


def shape(view: Upload, part_urls: list[direct.PartUrl] | None = None) -> dict[str, Any]:
    """A file and its upload session as the API answers them (with the part URLs of a new direct upload)."""
    session = view.session
    return {
        "file": view.file,
        "upload": {
            "file_id": session.file_id,
            "transfer": view.protocol.transfer,
            **({"parts": part_urls} if part_urls is not None else {}),
            "state": session.state,
            "part_size": session.part_size,
            "part_count": session.part_count,
            "expires_at": session.expires_at,
            "completed_at": session.completed_at,
            "parts_received": [part.part_number for part in view.parts],
        },
    }


@blp.route("")
class Uploads(MethodView):
    @blp.doc(operationId="createUpload")
    @blp.arguments(UploadCreateSchema)
    @blp.response(201, UploadViewSchema)
    @problems(blp, 403, 413, 422)
    @rate_limited(blp, "uploads")
    def post(self, body: dict[str, Any]) -> Any:
        """Start an upload: creates the file and its session, and answers the part size, count and expiry. With
        `"transfer": "direct"` (S3 only; 422 direct_transfer_unavailable on fs) the answer also carries a presigned
        PUT URL per part: the bytes go straight to the store."""
        new = uploads.NewUpload(
            name=body["name"],
            size_bytes=body["size_bytes"],
            mime_type=body["mime_type"],
            purpose=body["purpose"],
            sha256=(body.get("sha256") or "").lower() or None,
            scope_id=body.get("scope_id"),
        )
        if body["transfer"] == "direct":
            view, urls = direct.create(runtime(), caller(), new)
            return shape(view, urls)
        return shape(uploads.create_upload(runtime(), caller(), new))


@blp.route("/<uuid:file_id>")
class UploadById(MethodView):
    @blp.doc(operationId="getUpload")
    @blp.response(200, UploadViewSchema)
    @problems(blp, 403, 404)
    def get(self, file_id: uuid.UUID) -> Any:
        """Show the upload session and the parts received."""
        return shape(uploads.get_upload(runtime(), caller(), file_id))

    @blp.doc(operationId="abortUpload")
    @blp.response(204)
    @problems(blp, 403, 404, 409)
    def delete(self, file_id: uuid.UUID) -> Any:
        """Abort the upload: the file becomes failed and its parts are purged."""
        uploads.abort_upload(runtime(), caller(), file_id)


@blp.route("/<uuid:file_id>/parts/<part:part_number>")
class UploadPart(MethodView):
    @blp.doc(
        requestBody={
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    )
    @blp.doc(operationId="putUploadPart")
    @blp.response(200, PartSchema)
    @problems(blp, 403, 404, 409, 410, 415, 422)
    def put(self, file_id: uuid.UUID, part_number: int) -> Any:
        """Send part n (raw bytes): exactly part_size bytes, or the remainder for the last part."""
        if request.mimetype == "multipart/form-data":
            # A form (curl -F) wraps the bytes in its own framing: stored, it would be another file. (curl's
            # --data-binary says application/x-www-form-urlencoded of raw bytes: that one is taken as it is.)
            raise UnsupportedMediaType(
                "raw_bytes_expected",
                "Send the part's raw bytes as the body (curl --data-binary "
                "@part -H 'Content-Type: application/octet-stream'), not a form (-F).",
            )
        size = uploads.put_part(
            runtime(),
            caller(),
            file_id,
            part_number,
            request.stream,  # type: ignore[arg-type]
            request.content_length,
        )
        return {"part_number": part_number, "size_bytes": size}


@blp.route("/<uuid:file_id>/parts/<part:part_number>/url")
class UploadPartUrl(MethodView):
    @blp.doc(operationId="createUploadPartUrl")
    @blp.response(200, PartUrlSchema)
    @problems(blp, 403, 404, 409, 410, 422)
    def post(self, file_id: uuid.UUID, part_number: int) -> Any:
        """A fresh presigned PUT URL for part n of your open direct upload (409 once completing or ended)."""
        return direct.fresh_url(runtime(), caller(), file_id, part_number)


@blp.route("/<uuid:file_id>/complete")
class UploadComplete(MethodView):
    @blp.doc(operationId="completeUpload")
    @blp.response(200, FileSchema)
    @problems(blp, 403, 404, 409, 410, 422)
    @rate_limited(blp, "completions")
    def post(self, file_id: uuid.UUID) -> Any:
        """Assemble the file, verify its size and sha256, and start the scan. A mismatch fails the file
        (422 with reason size_mismatch or checksum_mismatch)."""
        return uploads.complete_upload(runtime(), caller(), file_id)
