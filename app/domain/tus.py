"""tus 1.0.0 (D19): the protocol's headers and the offset of an upload. Pure.

A tus upload is an upload session of protocol `tus`. Its bytes arrive in PATCH bodies of any size; whole parts
(`part_size`, the last one the remainder) go into the session's parts as for the native API, and the bytes past
the last whole part wait in the upload's tail object (`uploads/<id>/tail`, `tail_bytes` of them).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

VERSION = "1.0.0"
EXTENSIONS = ("creation", "creation-with-upload", "termination", "expiration", "checksum")
CHECKSUM_ALGORITHMS = ("sha1", "sha256", "md5")
DIGEST_SIZES = {"sha1": 20, "sha256": 32, "md5": 16}  # bytes of each algorithm's digest
OFFSET_OCTET_STREAM = "application/offset+octet-stream"
# The headers a browser client must be allowed to send and to read (CORS).
REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "Tus-Resumable",
    "Upload-Length",
    "Upload-Metadata",
    "Upload-Offset",
    "Upload-Checksum",
    "Upload-Defer-Length",
    "Upload-Concat",
    "X-HTTP-Method-Override",
    "X-Requested-With",
)
EXPOSED_HEADERS = (
    "Location",
    "Upload-Offset",
    "Upload-Length",
    "Upload-Metadata",
    "Upload-Expires",
    "Tus-Resumable",
    "Tus-Version",
    "Tus-Extension",
    "Tus-Max-Size",
    "Tus-Checksum-Algorithm",
)

_METADATA_KEY = re.compile(r"^[!-+\--~]+$")  # printable ASCII but space and comma
_SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_NUMBER = re.compile(r"^[0-9]{1,19}$")


class ProtocolError(ValueError):
    """A header breaks the protocol; `reason` is the machine-readable reason (never a value of the header)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def parse_length(value: str | None, reason: str) -> int | None:
    """A non-negative decimal header (Upload-Length, Upload-Offset), or None when absent.

    Raises:
        ProtocolError(reason): not a non-negative decimal number.
    """
    if value is None:
        return None
    if not _NUMBER.fullmatch(value.strip()):
        raise ProtocolError(reason)
    return int(value.strip())


def parse_metadata(header: str | None) -> dict[str, str | None]:
    """Upload-Metadata: comma-separated pairs `key base64(value)`, a key alone having no value.

    Raises:
        ProtocolError(metadata_invalid): a malformed pair, a repeated key, a value that is not base64 of
            UTF-8 text.
    """
    found: dict[str, str | None] = {}
    if header is None or not header.strip():
        return found
    for pair in header.split(","):
        words = pair.strip().split(" ")
        if len(words) > 2 or not _METADATA_KEY.fullmatch(words[0]) or words[0] in found:
            raise ProtocolError("metadata_invalid")
        if len(words) == 1:
            found[words[0]] = None
            continue
        try:
            found[words[0]] = base64.b64decode(words[1], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ProtocolError("metadata_invalid") from None
    return found


def encode_metadata(values: dict[str, str]) -> str:
    """Upload-Metadata for these pairs (the answer of HEAD to the upload's own uploader)."""
    return ",".join(
        f"{name} {base64.b64encode(value.encode('utf-8')).decode('ascii')}" for name, value in values.items()
    )


@dataclass(frozen=True)
class CreationMetadata:
    """What a tus creation asks for, read from Upload-Metadata: Lethe's own names (`filename`, `filetype`,
    `purpose`, `sha256`), and the names Uppy sends (`name`, `type`) when those are absent."""

    name: str | None
    mime_type: str
    purpose: str
    sha256: str | None


def creation_metadata(values: dict[str, str | None]) -> CreationMetadata:
    """The upload a creation's metadata describes.

    Raises:
        ProtocolError(sha256_invalid): a `sha256` that is not 64 hex digits.
    """
    name = values.get("filename") or values.get("name")
    mime_type = values.get("filetype") or values.get("type") or "application/octet-stream"
    sha256 = values.get("sha256")
    if sha256 is not None and not _SHA256_HEX.fullmatch(sha256):
        raise ProtocolError("sha256_invalid")
    return CreationMetadata(
        name=name,
        mime_type=mime_type,
        purpose=values.get("purpose") or "attachment",
        sha256=sha256.lower() if sha256 else None,
    )


def parse_checksum(header: str | None) -> tuple[str, bytes] | None:
    """Upload-Checksum: `<algorithm> <base64 digest>`, or None when absent.

    Raises:
        ProtocolError(checksum_algorithm_unsupported | checksum_invalid).
    """
    if header is None:
        return None
    words = header.strip().split(" ")
    if len(words) != 2:
        raise ProtocolError("checksum_invalid")
    algorithm, encoded = words[0].lower(), words[1]
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise ProtocolError("checksum_algorithm_unsupported")
    try:
        digest = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ProtocolError("checksum_invalid") from None
    if len(digest) != DIGEST_SIZES[algorithm]:
        raise ProtocolError("checksum_invalid")  # a hex digest (valid base64 letters) decodes to the wrong length
    return algorithm, digest


def offset_of(length: int, part_count: int, part_sizes: list[int], tail_bytes: int, completed: bool) -> int:
    """The offset a tus client is told: every byte received for good.

    That is the parts recorded and the tail, except that a last part recorded by a final PATCH whose
    completion did not happen does not count: the client sends it once more, and that PATCH completes the
    upload (tus clients take an offset equal to the length for a finished upload and would never ask again).
    """
    if completed:
        return length
    if len(part_sizes) >= part_count:
        return sum(part_sizes[: part_count - 1])
    return sum(part_sizes) + tail_bytes


def next_part_number(part_sizes: list[int]) -> int:
    """The number of the part a PATCH fills next: parts are recorded in order, 1..n."""
    return len(part_sizes) + 1
