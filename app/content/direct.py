# Direct uploads sign URLs; they never carry a byte. The session row and its multipart upload exist before any
# URL is signed (create_upload commits the row after the store began the upload), a URL lives no longer than
# the session nor file.direct_url_ttl, and the completion trusts only what the store lists (ListParts), never
# a size or ETag from the client. Every abort of a direct upload is repeated and confirmed (cleanup m).
"""Direct uploads (D19): parts go straight to S3 through presigned part URLs."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from app.content import uploads
from app.content.sessions import Upload, check_not_completing, check_open, require_write, visible
from app.content.uploads import NewUpload
from app.domain.uploads import DIRECT
from app.errors import Conflict, Invalid

if TYPE_CHECKING:
    from app.domain.access import Principal
    from app.runtime import Runtime

MIN_URL_LIFETIME = timedelta(seconds=1)  # S3's presigned URLs live at least a second (and at most 7 days)


@dataclass(frozen=True)
class PartUrl:
    """Where part n goes by a plain PUT, until when."""

    number: int
    url: str
    expires_at: datetime


def part_urls(rt: Runtime, upload: Upload, numbers: Iterable[int]) -> list[PartUrl]:
    """Sign a PUT URL for each of these parts: valid until the earlier of the session's expiry and
    file.direct_url_ttl from now. Local signing: no request to the store."""
    now = rt.clock.now()
    expires_at = min(upload.session.expires_at, now + rt.limits.direct_url_ttl)
    lifetime = max(expires_at - now, MIN_URL_LIFETIME)
    store = rt.store_named(upload.file.store)  # the store the upload began in (the primary when it began)
    return [PartUrl(number, store.presign_part(upload.ref, number, lifetime), expires_at) for number in numbers]


def create(rt: Runtime, principal: Principal, new: NewUpload) -> tuple[Upload, list[PartUrl]]:
    """Create a direct upload: the file, its session and the multipart upload (committed first), then a URL
    for every part.

    Raises:
        Invalid(direct_transfer_unavailable): the store takes no direct uploads (the fs driver).
        Invalid(direct_transfer_unsealed): new files are sealed (file.encryption on), and a direct upload's
            bytes would reach the store as the client sent them, out of reach of the file's key.
    """
    if not rt.store.supports_direct:
        raise Invalid(
            "direct_transfer_unavailable",
            "This installation's store takes no direct uploads (file.storage.driver is fs); send the parts "
            "through the API.",
        )
    if rt.limits.sealed:
        raise Invalid(
            "direct_transfer_unsealed",
            "This installation seals every file it stores under the file's own key (file.encryption on); a "
            "direct upload would put the bytes in the store as they are. Send the parts through the API "
            '("transfer": "api") or tus.',
        )
    upload = uploads.create_upload(rt, principal, dataclasses.replace(new, protocol=DIRECT))
    return upload, part_urls(rt, upload, range(1, upload.session.part_count + 1))


def fresh_url(rt: Runtime, principal: Principal, file_id: uuid.UUID, part_number: int) -> PartUrl:
    """A new URL for part n of the caller's open direct upload (409 once completing or ended, 410 expired)."""

    upload = rt.db.read(lambda conn: visible(conn, principal, file_id))
    session = upload.session
    require_write(principal)
    if upload.protocol is not DIRECT:
        raise Conflict("not_a_direct_upload", "This upload's parts go through the API (PUT .../parts/{n}).")
    now = rt.clock.now()
    check_open(session, now)
    check_not_completing(rt, session, now)
    if not 1 <= part_number <= session.part_count:
        raise Conflict("part_number_out_of_range", "This upload has no such part: its parts are 1 to its part_count.")
    (url,) = part_urls(rt, upload, [part_number])
    return url
