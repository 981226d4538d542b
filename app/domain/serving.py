"""Serving a file's bytes over HTTP (RFC 9110): its validators, conditional requests, one byte range, and whether
it may be shown inline. Pure: no I/O; the caller passes the request's headers and the file's facts.

- The entity tag is strong and names one stored object (the file, its original's revision, the variant): an
  original is never rewritten, so the tag changes exactly when the bytes do. It is a keyed digest of those
  names, never of the content (a content digest is never shown).
- One range is served as 206; several ranges, or a range this code does not read, are answered whole (200), as
  RFC 9110 allows; a range the file cannot satisfy is 416.
- Inline display is for a short list of types a browser renders without running anything, and only when the
  type detected from the bytes is the declared one. Anything else is an attachment of
  application/octet-stream.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

# Types a browser shows without running code of the file's: raster images, audio and video. Never SVG, HTML,
# XML, PDF (its viewers run scripts) or any other document.
INLINE_TYPES = frozenset(
    {
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
        "audio/mpeg",
        "audio/ogg",
        "audio/wav",
        "audio/flac",
        "audio/mp4",
        "audio/webm",
        "video/mp4",
        "video/webm",
        "video/ogg",
    }
)
# Names of one type that uploaders declare (and detection libraries answer) beside the registered one.
ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "audio/mp3": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-flac": "audio/flac",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "video/x-m4v": "video/mp4",
    "application/ogg": "video/ogg",
}
ATTACHMENT_TYPE = "application/octet-stream"
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


def canonical_type(mime_type: str | None) -> str | None:
    """A media type without parameters, lower case, with a common alias replaced by its registered name."""
    if not mime_type:
        return None
    base = mime_type.split(";", 1)[0].strip().lower()
    return ALIASES.get(base, base) or None


def inline_type(declared: str, detected: str | None) -> str | None:
    """The type to show a file inline as, or None when it must be an attachment: the detected type is on the
    list, and the uploader declared that same type (a mismatch is never shown)."""
    seen = canonical_type(detected)
    if seen is None or seen not in INLINE_TYPES:
        return None
    return seen if canonical_type(declared) == seen else None


def entity_tag(file_id: uuid.UUID, object_key: str, variant: str | None = None) -> str:
    """The strong ETag of one stored object of a file (quoted)."""
    names = b"\0".join([file_id.bytes, object_key.encode(), (variant or "").encode()])
    return '"' + hashlib.blake2b(names, digest_size=12, person=b"lethe-etag").hexdigest() + '"'


def http_date(moment: datetime) -> str:
    """An IMF-fixdate (Last-Modified), to the second."""
    return format_datetime(moment.astimezone(UTC).replace(microsecond=0), usegmt=True)


def _parse_date(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _tags(header: str) -> list[str]:
    return [tag.strip() for tag in header.split(",") if tag.strip()]


def _weak_match(header: str, etag: str) -> bool:
    """If-None-Match: a weak comparison (W/ is ignored on either side); `*` matches any current object."""
    bare = etag.removeprefix("W/")
    return any(tag == "*" or tag.removeprefix("W/") == bare for tag in _tags(header))


def _strong_match(header: str, etag: str) -> bool:
    """If-Match and If-Range: a strong comparison (a weak tag never matches)."""
    return any(tag == "*" or (tag == etag and not tag.startswith("W/")) for tag in _tags(header))


@dataclass(frozen=True)
class Validators:
    """What a response says of the stored object it serves."""

    etag: str
    last_modified: datetime  # to the second, as sent


@dataclass(frozen=True)
class Conditions:
    """The conditional and range headers of a request, as sent (None when absent)."""

    if_match: str | None = None
    if_none_match: str | None = None
    if_modified_since: str | None = None
    if_unmodified_since: str | None = None
    if_range: str | None = None
    range: str | None = None


def _seconds(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(microsecond=0)


def precondition(conditions: Conditions, validators: Validators, safe: bool = True) -> int | None:
    """The answer the preconditions decide before any byte is read (RFC 9110 13.2.2): 412, 304 (a safe
    method), or None to go on."""
    modified = _seconds(validators.last_modified)
    if conditions.if_match is not None:
        if not _strong_match(conditions.if_match, validators.etag):
            return 412
    elif conditions.if_unmodified_since is not None:
        since = _parse_date(conditions.if_unmodified_since)
        if since is not None and modified > since:
            return 412
    if conditions.if_none_match is not None:
        if _weak_match(conditions.if_none_match, validators.etag):
            return 304 if safe else 412
    elif conditions.if_modified_since is not None and safe:
        since = _parse_date(conditions.if_modified_since)
        if since is not None and modified <= since:
            return 304
    return None


@dataclass(frozen=True)
class ByteRange:
    """The bytes first..last (inclusive) of a representation of `size` bytes."""

    first: int
    last: int
    size: int

    @property
    def length(self) -> int:
        """How many bytes the range holds."""
        return self.last - self.first + 1

    @property
    def content_range(self) -> str:
        """The Content-Range header of a 206."""
        return f"bytes {self.first}-{self.last}/{self.size}"


UNSATISFIABLE = "unsatisfiable"


def requested_range(conditions: Conditions, validators: Validators, size: int) -> ByteRange | str | None:
    """The one range to serve: a ByteRange (206), UNSATISFIABLE (416), or None for the whole representation
    (no Range, a Range of another unit, several ranges, a malformed one, or an If-Range that does not match)."""
    header = conditions.range
    if header is None or "," in header:
        return None
    if conditions.if_range is not None and not _if_range_holds(conditions.if_range, validators):
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    first_text, last_text = match.groups()
    if not first_text and not last_text:
        return None
    if not first_text:  # a suffix: the last n bytes
        suffix = _position_number(last_text)
        if suffix == 0 or size == 0:
            return UNSATISFIABLE
        return ByteRange(max(size - suffix, 0), size - 1, size)
    first = _position_number(first_text)
    if last_text and _position_number(last_text) < first:
        return None  # invalid: ignored, as RFC 9110 says
    if first >= size:
        return UNSATISFIABLE
    last = _position_number(last_text) if last_text else size - 1
    return ByteRange(first, min(last, size - 1), size)


_BEYOND = 10**18  # past any file's end: what a position of more digits than that means


def _position_number(digits: str) -> int:
    """A byte position as the header writes it, however many digits (Python refuses int() of more than 4,300, and
    a number that long only ever means "past the end")."""
    significant = digits.lstrip("0")
    return int(significant) if 0 < len(significant) <= 18 else (_BEYOND if significant else 0)


def _if_range_holds(header: str, validators: Validators) -> bool:
    header = header.strip()
    if header.startswith('"') or header.startswith("W/"):
        return header == validators.etag  # strong comparison of one tag
    since = _parse_date(header)
    return since is not None and since == _seconds(validators.last_modified)
