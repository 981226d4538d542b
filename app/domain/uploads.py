"""Upload arithmetic and file names. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

MAX_NAME_LENGTH = 255
# A file name: no control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F). Written so that
# Python and the JSON Schema of the OpenAPI document read it alike.
NAME_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$"


def part_count(size_bytes: int, part_size: int) -> int:
    """How many parts a file of size_bytes is sent in (at least one)."""
    return max(1, math.ceil(size_bytes / part_size))


def expected_part_size(size_bytes: int, part_size: int, part_number: int) -> int:
    """The exact size of part n: part_size for every part but the last, the remainder for the last."""
    count = part_count(size_bytes, part_size)
    if not 1 <= part_number <= count:
        raise ValueError("part number out of range")
    if part_number < count:
        return part_size
    return size_bytes - part_size * (count - 1)


def listed_parts_problem(listed: list[tuple[int, int]], size_bytes: int, part_size: int) -> str | None:
    """What is wrong with the parts a store lists for a direct upload, judged by the store's own
    list, never by the client: `parts_missing` when a part 1..n is not there yet (the client may still send
    it), `size_mismatch` when a part has another size than the plan or a part past n exists (final: the file
    fails), None when parts 1..n are there with their exact sizes (so their total is size_bytes)."""
    count = part_count(size_bytes, part_size)
    numbers = {number for number, _ in listed}
    if any(number < 1 or number > count for number in numbers):
        return "size_mismatch"
    if any(size != expected_part_size(size_bytes, part_size, number) for number, size in listed):
        return "size_mismatch"
    if numbers != set(range(1, count + 1)):
        return "parts_missing"
    return None


@dataclass(frozen=True)
class UploadLimits:
    """The limits an upload works by, built once per process from the configuration (app.runtime)."""

    part_size: int
    max_size: int
    max_attachments: int
    session_ttl: timedelta
    complete_timeout: timedelta


def lease_in_force(since: datetime | None, now: datetime, timeout: timedelta) -> bool:
    """Whether a lease on an upload (a completion's, a tus PATCH's) is in force: taken, and not longer ago than
    timeout (a lease left by a crashed process may then be taken over)."""
    return since is not None and now - since < timeout


def content_disposition(name: str | None, disposition: str = "attachment") -> str:
    """A safe `Content-Disposition` (attachment or inline) with an ASCII fallback and an RFC 6266 / 5987
    `filename*`; without a name (a link's answer names none), the disposition alone."""
    if name is None:
        return disposition
    fallback = "".join(ch if 0x20 <= ord(ch) < 0x7F and ch not in '"\\;' else "_" for ch in name).strip() or "file"
    encoded = quote(name, safe="!#$&+-.^_`|~")
    return f"{disposition}; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"


def human_size(size_bytes: int) -> str:
    """A byte count as an operator writes it (8 MiB, 1 GiB, 1500 bytes): for answers that state a limit."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor} {unit}"
    return f"{size_bytes} bytes"
