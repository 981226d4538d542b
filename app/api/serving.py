"""A served file as an HTTP response (RFC 9110): validators, conditional answers, one byte range, inline or
attachment, and the body from the store (sendfile for a whole file on fs), or a redirect to a presigned GET
(file.s3.download redirect).

Every answer is `private` and revalidated on each use (`no-cache`): no shared cache keeps a user's file, and a
browser asks again, so that a file deleted a moment ago is not shown from its cache.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

from flask import Response, request
from werkzeug.wsgi import wrap_file

from app.api import problems
from app.content.serve import Served
from app.domain.serving import UNSATISFIABLE, ByteRange, Conditions, http_date, precondition, requested_range
from app.domain.uploads import content_disposition
from app.errors import ContentCorrupt, Gone, NotFound
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.serve")
CACHE_CONTROL = "private, no-cache"


def conditions() -> Conditions:
    """The request's conditional and range headers."""
    headers = request.headers
    return Conditions(
        if_match=headers.get("If-Match"),
        if_none_match=headers.get("If-None-Match"),
        if_modified_since=headers.get("If-Modified-Since"),
        if_unmodified_since=headers.get("If-Unmodified-Since"),
        if_range=headers.get("If-Range"),
        range=headers.get("Range"),
    )


def _headers(served: Served) -> dict[str, str]:
    disposition = "inline" if served.inline else "attachment"
    return {
        "ETag": served.validators.etag,
        "Last-Modified": http_date(served.validators.last_modified),
        "Accept-Ranges": "bytes",
        "Cache-Control": CACHE_CONTROL,
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Content-Disposition": content_disposition(
            None if served.via_link or served.variant else served.row.original_name, disposition
        ),
    }


def respond(rt: Runtime, served: Served) -> Response:
    """The answer to a GET or HEAD of a served file."""
    wanted = conditions()
    headers = _headers(served)
    decided = precondition(wanted, served.validators)
    if decided == 304:
        return Response(
            status=304, headers={name: headers[name] for name in ("ETag", "Last-Modified", "Cache-Control")}
        )
    if decided == 412:
        return problems.problem(
            412,
            reason="precondition_failed",
            detail="The file is not the one the request's If-Match or If-Unmodified-Since names.",
        )
    span = requested_range(wanted, served.validators, served.size)
    if span == UNSATISFIABLE:
        return problems.problem(
            416,
            reason="range_not_satisfiable",
            detail=f"The file has {served.size} bytes.",
            headers={"Content-Range": f"bytes */{served.size}", "Accept-Ranges": "bytes"},
        )
    assert span is None or isinstance(span, ByteRange)
    status = 206 if span is not None else 200
    if span is not None:
        headers["Content-Range"] = span.content_range
    length = span.length if span is not None else served.size
    if request.method == "HEAD":
        response = Response(status=status, mimetype=served.content_type, headers=headers)
        response.headers["Content-Length"] = str(length)
        return response
    if rt.cfg.file.s3.download == "redirect" and rt.store_named(served.row.store).supports_direct:
        redirect = _redirect(rt, served, headers)
        if redirect is not None:
            return redirect
    return _body(rt, served, span, status, length, headers)


def _redirect(rt: Runtime, served: Served, headers: dict[str, str]) -> Response | None:
    # The row was read just now; the bytes come from the store for at most file.s3.presign_ttl, or less when
    # a link ends sooner. The client sends its Range to the store itself. A sealed file has no URL (None): the
    # store holds only its ciphertext, which the api opens.
    ttl = rt.cfg.file.s3.presign_ttl
    if served.expires_at is not None:
        ttl = min(ttl, max(served.expires_at - rt.clock.now(), timedelta(seconds=1)))
    # The URL is signed with the disposition alone, never the file's name: a presigned URL lands in the store's
    # access log, the browser's history and every proxy's log, out of any deletion's reach. The browser names
    # the download from the URL's last segment (an id, never a name); an application that wants the name sets
    # the `download` attribute, as with a link.
    disposition = "inline" if served.inline else "attachment"
    url = rt.files.presigned(served.row, ttl, served.content_type, disposition, served.variant)
    if url is None:
        return None
    return Response(
        status=302, headers={"Location": url, "Cache-Control": "private, no-store", "X-Content-Type-Options": "nosniff"}
    )


def _body(
    rt: Runtime, served: Served, span: ByteRange | None, status: int, length: int, headers: dict[str, str]
) -> Response:
    try:
        local = rt.files.local_file(served.row, served.variant) if span is None else None
        if local is not None:  # the whole file from a local disk: the server may send it itself (sendfile)
            body = wrap_file(request.environ, local)
            closer = local.close
        else:
            # A sealed file is opened segment by segment; its first chunk is read now, so that a missing or
            # tampered object answers a problem instead of a body that ends short.
            chunks = rt.files.read(
                served.row, span.first if span else 0, span.length if span else None, served.variant, served.size
            )
            body, closer = _ending_short_when_corrupt(chunks, served), chunks.close
    except NotFound:
        log_event(log, "warning", "file.content_missing", "content missing", file_id=str(served.row.id))
        raise Gone("content_missing") from None
    except ContentCorrupt:
        _corrupt(served)
        raise
    response = Response(body, status=status, mimetype=served.content_type, headers=headers, direct_passthrough=True)
    response.headers["Content-Length"] = str(length)
    response.call_on_close(closer)
    return response


def _corrupt(served: Served) -> None:
    metrics.CONTENT_CORRUPT.inc()
    log_event(
        log,
        "warning",
        "file.content_corrupt",
        "stored content did not open as what was sealed; nothing of it was served",
        file_id=str(served.row.id),
    )


def _ending_short_when_corrupt(chunks: Iterator[bytes], served: Served) -> Generator[bytes, None, None]:
    """The body; a later segment that does not open ends it short of its Content-Length (the client sees a cut
    transfer, never altered bytes)."""
    try:
        yield from chunks
    except ContentCorrupt:
        _corrupt(served)
        raise
