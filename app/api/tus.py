"""tus 1.0.0 at /api/v1/tus (D19): creation, creation-with-upload, termination, expiration, checksum.

The protocol is https://tus.io/protocols/resumable-upload; what is Lethe's own is said in docs/api.md ("tus"):
the upload URL names the file id, the same tokens and scopes as the rest of the API, problem+json bodies on
errors, 410 for a terminated or expired upload, 409 for terminating a complete one.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Response, request
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import ValidationError
from werkzeug.exceptions import ClientDisconnected
from werkzeug.http import http_date

from app.api import problems as problem_answers
from app.api.common import caller, problems, runtime
from app.api.limits import rate_limited
from app.api.schemas import UploadCreateSchema
from app.content import tus
from app.content.uploads import NewUpload
from app.domain import tus as protocol
from app.errors import BadRequest, ChecksumMismatch, StorageError, TooLarge, UnsupportedMediaType

PREFIX = "/api/v1/tus"
blp = Blueprint(
    "tus",
    __name__,
    url_prefix=PREFIX,
    description=(
        "tus 1.0.0 resumable uploads (https://tus.io/protocols/resumable-upload) with the extensions creation, "
        "creation-with-upload, termination, expiration and checksum. Every request but OPTIONS carries "
        "`Tus-Resumable: 1.0.0` and a bearer token; the upload URL is `/api/v1/tus/{file_id}`, the id of the file "
        "the upload becomes. Lethe specifics: docs/api.md, section tus."
    ),
)

_METADATA_NAMES = {
    "name": "filename",
    "mime_type": "filetype",
    "purpose": "purpose",
    "sha256": "sha256",
    "size_bytes": "Upload-Length",
}


def _header(name: str, description: str, required: bool = False, **schema: Any) -> dict[str, Any]:
    """A header parameter, declared as strictly as the server checks it."""
    return {
        "in": "header",
        "name": name,
        "required": required,
        "description": description,
        "schema": schema or {"type": "string"},
    }


_TUS_RESUMABLE = _header(
    "Tus-Resumable", "Always 1.0.0 (412 otherwise).", required=True, type="string", enum=[protocol.VERSION]
)
_CHECKSUM: dict[str, Any] = {
    "type": "string",
    "pattern": "^(sha1 [A-Za-z0-9+/]{27}=|sha256 [A-Za-z0-9+/]{43}=|md5 [A-Za-z0-9+/]{22}==)$",
}
_OCTETS = {
    "required": False,
    "content": {protocol.OFFSET_OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}},
}


@blp.before_request
def _tus_version() -> Response | None:
    """Every request but OPTIONS speaks tus 1.0.0: 412 naming the version this server speaks otherwise."""
    if request.method != "OPTIONS" and request.headers.get("Tus-Resumable") != protocol.VERSION:
        return problem_answers.problem(
            412,
            "precondition_failed",
            reason="tus_version_unsupported",
            detail=f"Send Tus-Resumable: {protocol.VERSION}.",
            headers={"Tus-Version": protocol.VERSION},
        )
    if request.method in ("POST", "PATCH"):
        # A tus body may be the whole file (tus-js-client sends one PATCH by default), not one part: its bound is
        # file.max_size here, and the upload's own length in app.content.tus.
        request.max_content_length = runtime().limits.max_size
    return None


@blp.after_app_request
def _tus_headers(response: Response) -> Response:
    """Every answer under /api/v1/tus says the version, a routing 404 or a 401 before the handler too."""
    if request.path == PREFIX or request.path.startswith(PREFIX + "/"):
        response.headers["Tus-Resumable"] = protocol.VERSION
        response.headers["Cache-Control"] = "no-store"
    return response


def _options() -> Response:
    response = Response(status=204)
    response.headers.update(
        {
            "Tus-Version": protocol.VERSION,
            "Tus-Extension": ",".join(protocol.EXTENSIONS),
            "Tus-Max-Size": str(runtime().limits.max_size),
            "Tus-Checksum-Algorithm": ",".join(protocol.CHECKSUM_ALGORITHMS),
        }
    )
    return response


T = TypeVar("T")


def _parsed(value: Any, what: Callable[[Any], T]) -> T:
    try:
        return what(value)
    except protocol.ProtocolError as exc:
        raise BadRequest(exc.reason) from None


def _require_octets() -> None:
    if request.mimetype != protocol.OFFSET_OCTET_STREAM:
        raise UnsupportedMediaType(
            "offset_octet_stream_expected", f"Send the bytes with Content-Type: {protocol.OFFSET_OCTET_STREAM}."
        )


def _upload_headers(response: Response, upload: tus.TusUpload) -> Response:
    response.headers["Upload-Offset"] = str(upload.offset)
    if upload.expires_at is not None:
        response.headers["Upload-Expires"] = http_date(upload.expires_at)
    return response


def _append(file_id: uuid.UUID, offset: int) -> tus.TusUpload:
    checksum = _parsed(request.headers.get("Upload-Checksum"), protocol.parse_checksum)
    try:
        return tus.append(
            runtime(),
            caller(),
            file_id,
            offset,
            request.stream,  # type: ignore[arg-type]
            request.content_length,
            checksum,
        )
    except ClientDisconnected:
        raise BadRequest("body_incomplete") from None


@blp.route("")
class TusUploads(MethodView):
    @blp.doc(
        operationId="tusOptions",
        security=[],
        summary="What this tus server supports (no token needed)",
        responses={"204": {"description": "Tus-Version, Tus-Extension, Tus-Max-Size, Tus-Checksum-Algorithm"}},
    )
    def options(self) -> Any:
        """tus discovery: the version, extensions, maximum size and checksum algorithms (no token needed, as
        browsers send it first)."""
        return _options()

    @blp.doc(
        operationId="tusCreateUpload",
        parameters=[
            _TUS_RESUMABLE,
            _header(
                "Upload-Length",
                "The file's size in bytes (Upload-Defer-Length is refused: 400).",
                required=True,
                type="integer",
                minimum=0,
            ),
            _header(
                "Upload-Metadata",
                "Comma-separated `key base64(value)`: filename (required), filetype, "
                "purpose, sha256 (hex, checked at completion).",
            ),
            _header(
                "Upload-Checksum", "creation-with-upload: `sha1|sha256|md5 <base64>` of the body.", False, **_CHECKSUM
            ),
        ],
        requestBody=_OCTETS,
        responses={
            "201": {
                "description": "Created: Location /api/v1/tus/{file_id}, Upload-Expires, and "
                "Upload-Offset when the request carried bytes"
            }
        },
    )
    @problems(blp, 400, 403, 412, 413, 415, 422, 460)
    @rate_limited(blp, "uploads")
    def post(self) -> Any:
        """Create a tus upload (creation), optionally with its first bytes (creation-with-upload). The same
        rules as createUpload: size, purpose, name, quotas, scan.max_size."""
        if "Upload-Defer-Length" in request.headers:
            raise BadRequest("defer_length_unsupported", "Send Upload-Length: this server needs it up front.")
        if "Upload-Concat" in request.headers:
            raise BadRequest("concatenation_unsupported")
        length = _parsed(
            request.headers.get("Upload-Length"), lambda value: protocol.parse_length(value, "upload_length_invalid")
        )
        if length is None:
            raise BadRequest("upload_length_required")
        meta = _parsed(
            _parsed(request.headers.get("Upload-Metadata"), protocol.parse_metadata), protocol.creation_metadata
        )
        has_body = bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if has_body:
            _require_octets()
            if request.content_length is not None and request.content_length > length:
                raise TooLarge("past_upload_length")  # known before anything is created: nothing is
        try:
            fields = UploadCreateSchema().load(
                {
                    k: v
                    for k, v in {
                        "name": meta.name,
                        "size_bytes": length,
                        "mime_type": meta.mime_type,
                        "purpose": meta.purpose,
                        "sha256": meta.sha256,
                    }.items()
                    if v is not None
                }
            )
        except ValidationError as exc:
            found = exc.normalized_messages()  # type: ignore[no-untyped-call]
            errors = {_METADATA_NAMES.get(name, "unknown_fields"): messages for name, messages in found.items()}
            return problem_answers.problem(422, reason="metadata_invalid", errors=errors)
        upload = tus.create(
            runtime(),
            caller(),
            NewUpload(
                name=fields["name"],
                size_bytes=fields["size_bytes"],
                mime_type=fields["mime_type"],
                purpose=fields["purpose"],
                sha256=fields.get("sha256"),
            ),
        )
        response = Response(status=201)
        response.headers["Location"] = f"{PREFIX}/{upload.file_id}"
        if has_body:
            try:
                upload = _append(upload.file_id, 0)
            except TooLarge as exc:
                # A body without a length that ran past Upload-Length: the upload exists, so the answer names it
                # (Location), and the client can resume or terminate it.
                return problem_answers.problem(
                    413, reason=exc.reason, headers={"Location": response.headers["Location"]}
                )
            except (BadRequest, ChecksumMismatch, StorageError):
                upload = tus.status(
                    runtime(), caller(), upload.file_id, reading=False
                )  # the bytes count as far as kept
            _upload_headers(response, upload)
        elif length == 0:
            # An empty file is whole at its creation: its one empty part is written and the upload completes.
            upload = tus.append(runtime(), caller(), upload.file_id, 0, io.BytesIO(b""), 0, None)
            _upload_headers(response, upload)
        elif upload.expires_at is not None:
            response.headers["Upload-Expires"] = http_date(upload.expires_at)
        return response


@blp.route("/<uuid:file_id>")
class TusUpload(MethodView):
    @blp.doc(
        operationId="tusOptionsUpload",
        security=[],
        summary="CORS preflight of an upload URL",
        responses={"204": {"description": "As OPTIONS /api/v1/tus"}},
    )
    def options(self, file_id: uuid.UUID) -> Any:
        """tus discovery at an upload URL (browsers preflight PATCH, HEAD and DELETE here)."""
        return _options()

    @blp.doc(
        operationId="tusGetOffset",
        parameters=[_TUS_RESUMABLE],
        responses={
            "200": {
                "description": "Upload-Offset, Upload-Length, Upload-Metadata (to its uploader), "
                "Upload-Expires (while open), Cache-Control: no-store"
            }
        },
    )
    @problems(blp, 403, 404, 410, 412)
    def head(self, file_id: uuid.UUID) -> Any:
        """The upload's offset: the bytes received for good (its uploader only, with files:read)."""
        upload = tus.status(runtime(), caller(), file_id)
        response = _upload_headers(Response(status=200), upload)
        response.headers["Upload-Length"] = str(upload.length)
        response.headers["Upload-Metadata"] = protocol.encode_metadata(upload.metadata)
        return response

    @blp.doc(
        operationId="tusPatchUpload",
        parameters=[
            _TUS_RESUMABLE,
            _header(
                "Upload-Offset", "The upload's offset (409 when it is not).", required=True, type="integer", minimum=0
            ),
            _header(
                "Upload-Checksum",
                "`sha1|sha256|md5 <base64>` of this body: 460 and nothing kept on mismatch.",
                False,
                **_CHECKSUM,
            ),
        ],
        requestBody={**_OCTETS, "required": True},
        responses={
            "204": {
                "description": "Taken: Upload-Offset, Upload-Expires. The PATCH that brings the "
                "last byte completes the upload as completeUpload does."
            }
        },
    )
    @problems(blp, 400, 403, 404, 409, 410, 412, 413, 415, 422, 460)
    def patch(self, file_id: uuid.UUID) -> Any:
        """Send bytes at the upload's offset."""
        _require_octets()
        offset = _parsed(
            request.headers.get("Upload-Offset"), lambda value: protocol.parse_length(value, "upload_offset_invalid")
        )
        if offset is None:
            raise BadRequest("upload_offset_required")
        return _upload_headers(Response(status=204), _append(file_id, offset))

    @blp.doc(
        operationId="tusTerminateUpload",
        parameters=[_TUS_RESUMABLE],
        responses={"204": {"description": "Terminated: every byte of the upload goes at once"}},
    )
    @problems(blp, 403, 404, 409, 410, 412)
    def delete(self, file_id: uuid.UUID) -> Any:
        """Terminate an unfinished upload (as abortUpload). A complete upload answers 409 upload_not_open: it
        is a file now, deleted through deleteFile."""
        tus.terminate(runtime(), caller(), file_id)
        return Response(status=204)
