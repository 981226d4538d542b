"""The type of a file's stored original as its first bytes say (app/domain/detection.py), read once at completion."""

from __future__ import annotations

from app.domain.detection import HEAD_BYTES, UNRECOGNISED, detect
from app.errors import ContentCorrupt, NotFound, StorageError
from app.storage.files import FileStore, KeyedFile


def detect_stored(files: FileStore, row: KeyedFile) -> str | None:
    """The detected type of a file's stored original (one ranged read, of a sealed one only its first segment),
    UNRECOGNISED when its bytes show no known type (never read again); None when it cannot be read now: the file
    is then never shown inline, which is the safe side, and the cleanup's step p reads it later."""
    try:
        head = files.head(row, HEAD_BYTES)
    except (NotFound, StorageError, ContentCorrupt):
        return None
    return detect(head) or UNRECOGNISED
