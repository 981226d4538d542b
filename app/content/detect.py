"""The type of a file as its bytes say (puremagic, a maintained database of signatures): read once at completion
from the first bytes of the original, and trusted by inline display instead of the type the uploader declared."""

from __future__ import annotations

import puremagic

from app.errors import ContentCorrupt, NotFound, StorageError
from app.storage.files import FileStore, KeyedFile

HEAD_BYTES = 8192  # every signature puremagic reads lies within the first few kilobytes


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


def detect_stored(files: FileStore, row: KeyedFile) -> str | None:
    """The detected type of a file's stored original (one ranged read, of a sealed one only its first segment);
    None when it cannot be read now: the file is then never shown inline, which is the safe side."""
    try:
        chunks = files.read(row, 0, min(HEAD_BYTES, row.size_bytes))
    except (NotFound, StorageError, ContentCorrupt):
        return None
    try:
        head = b"".join(chunks)
    except (StorageError, ContentCorrupt):
        return None
    finally:
        chunks.close()
    return detect(head[:HEAD_BYTES])
