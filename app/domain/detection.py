"""The type of a file as its bytes say (puremagic, a maintained database of signatures), trusted by inline display
instead of the type the uploader declared. Pure: it is handed the first bytes."""

from __future__ import annotations

import puremagic

HEAD_BYTES = 8192  # every signature puremagic reads lies within the first few kilobytes
UNRECOGNISED = ""  # recorded for a file whose bytes were read and show no known type (never read again)


def detect(head: bytes) -> str | None:
    """The media type the first bytes of a file show, or None when nothing is recognised."""
    if not head:
        return None
    try:
        matches = puremagic.magic_string(head)
    except (puremagic.PureError, ValueError):
        return None
    for match in matches:
        if match.mime_type:
            return str(match.mime_type).lower()
    return None
