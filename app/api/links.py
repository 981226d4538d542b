"""File links (createFileLink makes them): the bytes of one file for whoever holds the link, with no
Authorization header; the link itself is the credential, checked with the file on every use."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from app.api import serving
from app.api.common import problems, runtime
from app.api.files import CONTENT_RESPONSES
from app.content import serve

PREFIX = "/api/v1/links/"
blp = Blueprint("links", __name__, url_prefix="/api/v1/links", description="File links")


@blp.route("/<string:token>")
class LinkContent(MethodView):
    @blp.doc(responses=CONTENT_RESPONSES, operationId="getLinkContent", security=[])
    @problems(blp, 403, 404, 410, 412, 416, 501)
    def get(self, token: str) -> Any:
        """The file a link names, as getFileContent serves it (ranges, validators, inline or attachment),
        without naming the file. 403 `link_invalid` or `link_expired`; 404 once the file is deleted."""
        return serving.respond(runtime(), serve.for_link(runtime(), token))
