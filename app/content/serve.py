"""Serving a file's original, or one of its image variants, to readers (D13): to its uploader or `manage` with a bearer token, or to anyone who
holds a link the reader made (createFileLink). Every use asks the row: a deleted, retired or undeliverable file
is 404 at once, whatever link or cache a client kept.

A served file is described by `Served`: the row, its validators, what type it may be shown as, and where its
bytes come from. The HTTP edge turns it into headers and a body (app/api/serving.py).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from app.content.files import visible_file
from app.db import files as files_sql
from app.db import variants as variants_sql
from app.db.files import FileRow
from app.domain.access import Principal
from app.domain.keys import VARIANTS
from app.domain.serving import ATTACHMENT_TYPE, INLINE_TYPES, Validators, entity_tag, inline_type
from app.domain.states import is_deliverable
from app.domain.variants import wants_variants
from app.errors import Conflict, Invalid, LinkRefused, NotConfigured, NotFound
from app.platform.links import BadLink, Link, Sealer
from app.platform.observability.logs import log_event

if TYPE_CHECKING:  # the services' collaborators (typed at every service boundary)
    from app.runtime import Runtime

log = logging.getLogger("lethe.serve")
DISPOSITIONS = ("attachment", "inline")


@dataclass(frozen=True)
class Served:
    """One file's original as a response serves it."""

    row: FileRow
    size: int
    validators: Validators
    content_type: str  # the detected type when shown inline, else application/octet-stream
    inline: bool  # shown inline (a type on the list, detected and declared alike), else an attachment
    via_link: bool  # a link's answer names no file name
    expires_at: datetime | None = None  # a link's end
    variant: str | None = None  # a variant served instead of the original (it names no file name either)


def _served(
    rt: Runtime,
    row: FileRow,
    disposition: str,
    via_link: bool,
    expires_at: datetime | None = None,
    variant: str | None = None,
) -> Served:
    if not is_deliverable(row.upload_state, row.scan_status) or row.object_key is None:
        raise NotFound()
    if (
        variant is None
        and disposition == "inline"
        and rt.content.strip_original
        and row.metadata_stripped is None
        and row.variants_state is not None
        and wants_variants(row.detected_type)
    ):
        # An image whose original was stored as uploaded (HEIC, AVIF, image.strip_metadata none, a file stored
        # before stripping) is shown inline through its preview: no metadata, no location, orientation applied. Until
        # one is ready (or when it got none), the original is an attachment. A file stored before variants were
        # made (or with image.variants off) was never offered one, and keeps the original's own rules.
        if any(thumb.get("name") == "preview" for thumb in row.thumbnails):
            variant = "preview"
        else:
            disposition = "attachment"
    if variant is not None:
        return _served_variant(rt, row, variant, disposition, via_link, expires_at)
    shown = inline_type(row.mime_type, row.detected_type) if disposition == "inline" else None
    modified = row.completed_at or row.created_at
    return Served(
        row,
        row.size_bytes,
        Validators(entity_tag(row.id, row.object_key), modified),
        shown or ATTACHMENT_TYPE,
        shown is not None,
        via_link,
        expires_at,
    )


def _served_variant(
    rt: Runtime, row: FileRow, name: str, disposition: str, via_link: bool, expires_at: datetime | None
) -> Served:
    assert row.object_key is not None
    recorded = rt.db.read(lambda conn: variants_sql.variant_of(conn, row.id, name)) if name in VARIANTS else None
    if recorded is None:
        raise NotFound()
    # A variant's type is the one Lethe wrote (a still or animated WebP): safe to show inline.
    shown = recorded.content_type if disposition == "inline" and recorded.content_type in INLINE_TYPES else None
    return Served(
        row,
        recorded.size_bytes,
        Validators(entity_tag(row.id, row.object_key, name), recorded.created_at),
        shown or ATTACHMENT_TYPE,
        shown is not None,
        via_link,
        expires_at,
        variant=name,
    )


def for_reader(
    rt: Runtime, principal: Principal, file_id: uuid.UUID, disposition: str = "attachment", variant: str | None = None
) -> Served:
    """The original (or one variant) of a deliverable file the caller may read.

    Raises:
        NotFound: not visible, not deliverable, or no such variant ready. Gone: retired (to its uploader).
            Forbidden: no files:read.
    """
    return _served(rt, visible_file(rt, principal, file_id), disposition, via_link=False, variant=variant)


def _sealer(rt: Runtime) -> Sealer:
    secret = rt.content.link_secret
    if not secret:
        raise NotConfigured("links_not_configured", "File links need file.link_secret.")
    return Sealer(secret)


def create_link(
    rt: Runtime,
    principal: Principal,
    file_id: uuid.UUID,
    disposition: str = "attachment",
    variant: str | None = None,
    ttl: timedelta | None = None,
) -> tuple[str, datetime]:
    """A link to one file's original for a reader without a bearer token (an <img>, a <video>, a download).

    Returns:
        (the link's token, when it ends).

    Raises:
        NotFound, Gone, Forbidden: as for reading the file. Invalid: `ttl_too_short`, `variant_unknown`.
            NotConfigured: no file.link_secret.
    """
    sealer = _sealer(rt)
    longest = rt.content.link_ttl
    life = min(ttl, longest) if ttl is not None else longest  # longer: cut to file.link_ttl (expires_at says)
    if life.total_seconds() < 1:
        raise Invalid("ttl_too_short", "A link works at least 1 s.")
    row = visible_file(rt, principal, file_id)
    if variant is not None and not any(thumb.get("name") == variant for thumb in row.thumbnails):
        raise Conflict("variant_unknown", "This file has no variant of that name ready.")
    _served(rt, row, disposition, via_link=True, variant=variant)  # readable now, or refused now
    expires_at = (rt.clock.now() + life).replace(microsecond=0)
    token = sealer.seal(Link(file_id, disposition, expires_at, variant))
    log_event(
        log,
        "info",
        "link.created",
        "file link created",
        file_id=str(file_id),
        disposition=disposition,
        ttl_s=int(life.total_seconds()),
    )
    return token, expires_at


def for_link(rt: Runtime, token: str) -> Served:
    """The original a link names, if the link is Lethe's, has not expired, and the file may still be read.

    Raises:
        LinkRefused: `link_invalid` (not sealed here, or tampered) or `link_expired`. NotFound: the file was
            deleted, retired or purged, or is not deliverable (checked on every use).
    """
    try:
        link = _sealer(rt).open(token)
    except BadLink:
        raise LinkRefused("link_invalid", "This link was not made by this service.") from None
    if rt.clock.now() >= link.expires_at:
        raise LinkRefused("link_expired", "This link expired; ask the application for a new one.")
    row = rt.db.read(lambda conn: files_sql.file_by_id(conn, link.file_id))
    if row is None or row.deleted_at is not None or row.retired_at is not None:
        raise NotFound()
    return _served(rt, row, link.disposition, via_link=True, expires_at=link.expires_at, variant=link.variant)
