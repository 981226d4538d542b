"""The key schema (D4). Pure: no I/O.

Keys are built only from a file id and this schema, never from a file name, and are never found by listing.

- originals: `f/<aa>/<bb>/<file_id>/orig-<r>` (r = 1, 2, ...)
- variants:  `f/<aa>/<bb>/<file_id>/v-<name>` for the names in VARIANTS (app/domain/variants.py describes them)
- parts (fs driver only): `uploads/<file_id>/part-<n>`
- the tail of a tus upload (both drivers): `uploads/<file_id>/tail`, the bytes past its last whole part
"""

from __future__ import annotations

import re
import uuid

from app.domain.variants import VARIANTS

__all__ = ["VARIANTS", "original_key", "part_key", "tail_key", "variant_key"]
FILES_PREFIX = "f/"
UPLOADS_PREFIX = "uploads/"

_SEGMENT_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")


class KeySchemaError(ValueError):
    """A key or a client-supplied segment breaks the key schema."""


def validate_key(key: str) -> str:
    """Check a whole key: relative, `/`-separated, no empty, `.` or `..` segment, no control character or
    backslash.

    Returns:
        The key, unchanged.

    Raises:
        KeySchemaError: the key is malformed (the message never repeats the key).
    """
    if not isinstance(key, str) or not key:
        raise KeySchemaError("empty key")
    if key.startswith("/"):
        raise KeySchemaError("absolute key")
    for segment in key.split("/"):
        _check_segment(segment)
    return key


def validate_segment(segment: str) -> str:
    """Check one client-supplied segment: a whole segment with no separator in it."""
    if "/" in segment:
        raise KeySchemaError("separator in a segment")
    _check_segment(segment)
    return segment


def _check_segment(segment: str) -> None:
    if segment in ("", ".", ".."):
        raise KeySchemaError("empty, '.' or '..' segment")
    if _SEGMENT_FORBIDDEN.search(segment):
        raise KeySchemaError("control character or backslash in a segment")


def _file_dir(file_id: uuid.UUID | str) -> str:
    hex_id = uuid.UUID(str(file_id)).hex
    canonical = str(uuid.UUID(hex_id))
    return f"{FILES_PREFIX}{hex_id[0:2]}/{hex_id[2:4]}/{canonical}"


def original_key(file_id: uuid.UUID | str, revision: int = 1) -> str:
    """The key of revision r of a file's original (`orig-<r>`, r >= 1)."""
    if revision < 1:
        raise KeySchemaError("revision must be at least 1")
    return f"{_file_dir(file_id)}/orig-{revision}"


def variant_key(file_id: uuid.UUID | str, name: str) -> str:
    """The key of one of the four variants of a file."""
    if name not in VARIANTS:
        raise KeySchemaError("unknown variant")
    return f"{_file_dir(file_id)}/v-{name}"


def part_key(file_id: uuid.UUID | str, part_number: int) -> str:
    """The key of one upload part on the fs driver (`uploads/<file_id>/part-<n>`, n >= 1)."""
    if part_number < 1:
        raise KeySchemaError("part number must be at least 1")
    return f"{UPLOADS_PREFIX}{uuid.UUID(str(file_id))}/part-{part_number}"


def tail_key(file_id: uuid.UUID | str) -> str:
    """The key of a tus upload's tail (`uploads/<file_id>/tail`): the bytes received past its last whole part,
    kept until the next PATCH makes a part of them."""
    return f"{UPLOADS_PREFIX}{uuid.UUID(str(file_id))}/tail"
