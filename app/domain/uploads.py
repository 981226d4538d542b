"""Upload arithmetic and file names. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote

from app.domain.quotas import NO_LIMIT, Limit

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
class Protocol:
    """How an upload's bytes travel, one value per protocol; `name` is what its session row records
    (upload_sessions.protocol), `transfer` what the API and the metrics call it."""

    name: str
    transfer: str
    # (reason, detail) of the 409 a native part (PUT .../parts/{n}) of such an upload gets; None: it takes them.
    native_parts_refused: tuple[str, str] | None
    keeps_tail: bool  # the bytes past its last whole part wait in a tail object (tus)
    parts_in_store_alone: bool  # its parts reach the store without the api: the store's list says which (direct)

    @property
    def through_api(self) -> bool:
        """Whether its bytes pass through the api (which may seal them): every protocol but direct."""
        return not self.parts_in_store_alone


NATIVE = Protocol("native", "api", None, keeps_tail=False, parts_in_store_alone=False)
TUS = Protocol(
    "tus",
    "tus",
    ("tus_upload", "This upload is sent through tus (PATCH /api/v1/tus/{id})."),
    keeps_tail=True,
    parts_in_store_alone=False,
)
DIRECT = Protocol(
    "direct",
    "direct",
    ("direct_upload", "This upload's parts go to their presigned URLs (POST .../parts/{n}/url gives a fresh one)."),
    keeps_tail=False,
    parts_in_store_alone=True,
)
PROTOCOLS = {protocol.name: protocol for protocol in (NATIVE, TUS, DIRECT)}


@dataclass(frozen=True)
class UploadLimits:
    """The values an upload works by, built once per process from the configuration (app/entry/wiring.py):
    the upload paths read them here, never the configuration in the middle of their work."""

    part_size: int
    max_size: int
    max_attachments: int
    session_ttl: timedelta
    complete_timeout: timedelta
    write_timeout: timedelta  # a tus PATCH's write lease without a sign of life
    write_wait: timedelta  # how long a PATCH waits for another's write lease
    direct_url_ttl: timedelta  # the longest a direct upload's part URL lives
    sealed: bool  # new files are sealed under their own key (file.encryption)
    scan_max_size: int | None  # the largest file the scanner takes; None: no scanner configured
    quota: Limit = NO_LIMIT  # the installation's default quota of a principal (quotas.default_*)

    def scan_reads(self, size_bytes: int) -> bool:
        """Whether the scan will stream every byte of a file of this size to clamd (a scanner is configured
        and takes it)."""
        return self.scan_max_size is not None and size_bytes <= self.scan_max_size


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
