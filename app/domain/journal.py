"""The deletion journal, as rules and values. Pure: no I/O.

Every committed end of a file (marked deleted, objects gone, row removed), every completed erasure, and every
legal hold placed or released becomes an entry: ids, a kind and a time, never a name, a key or a digest. A
person appears only as a keyed hash (`subject_hash`): enough to recognise them in a restored database, nothing
more. Entries are numbered (`seq`) when they are written to the journal, in segments named by their first and
last numbers, so that a database that has seen up to `position` knows at once whether the journal holds more:
a database behind its journal was restored from a backup.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

JOURNAL_PREFIX = "journal/"
FILE_MARKED, OBJECTS_GONE, ROW_REMOVED = "file.marked", "file.objects_gone", "file.row_removed"
ERASURE_COMPLETED, HOLD_PLACED, HOLD_RELEASED = "erasure.completed", "hold.placed", "hold.released"
KINDS = (FILE_MARKED, OBJECTS_GONE, ROW_REMOVED, ERASURE_COMPLETED, HOLD_PLACED, HOLD_RELEASED)
FILE_KINDS = (FILE_MARKED, OBJECTS_GONE, ROW_REMOVED)
_SEGMENT = re.compile(r"^([0-9]{16})-([0-9]{16})-([0-9]{8}T[0-9]{6}Z)\.jsonl$")


def subject_hash(key: str, subject_id: uuid.UUID) -> str:
    """A person as the journal names them: HMAC-SHA256 of their id under the journal key (hex)."""
    return hmac.new(key.encode(), uuid.UUID(str(subject_id)).bytes, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One journal entry: a kind, when it committed, and ids (files, a hold, an erasure, a person's hash)."""

    kind: str
    at: datetime
    files: tuple[uuid.UUID, ...] = ()
    via: str | None = None
    subject: str | None = None  # a keyed hash, never an id
    hold: uuid.UUID | None = None
    erasure: uuid.UUID | None = None
    case_ref: str | None = None  # an opaque ticket number (holds.case_ref_pattern), never a name
    seq: int = 0

    def body(self) -> dict[str, Any]:
        """The entry's members as stored before it is numbered (JSON-ready, no null)."""
        doc: dict[str, Any] = {}
        if self.files:
            doc["files"] = [str(file_id) for file_id in self.files]
        for name in ("via", "subject", "case_ref"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        for name in ("hold", "erasure"):
            if getattr(self, name) is not None:
                doc[name] = str(getattr(self, name))
        return doc


def line(entry: Entry) -> str:
    """An entry as one line of a segment."""
    return json.dumps({"seq": entry.seq, "kind": entry.kind, "at": entry.at.isoformat(), **entry.body()},
                      sort_keys=True, separators=(",", ":"))


def parse_line(text: str) -> Entry:
    """One line of a segment back into an entry. Raises ValueError for a line that is not one."""
    doc = json.loads(text)
    if doc.get("kind") not in KINDS or not isinstance(doc.get("seq"), int):
        raise ValueError("not a journal entry")
    return Entry(kind=doc["kind"], at=datetime.fromisoformat(doc["at"]),
                 files=tuple(uuid.UUID(file_id) for file_id in doc.get("files", [])), via=doc.get("via"),
                 subject=doc.get("subject"), hold=uuid.UUID(doc["hold"]) if "hold" in doc else None,
                 erasure=uuid.UUID(doc["erasure"]) if "erasure" in doc else None, case_ref=doc.get("case_ref"),
                 seq=doc["seq"])


@dataclass(frozen=True)
class Segment:
    """A segment's place in the journal, from its key: its first and last entries and when it was written."""

    key: str
    first: int
    last: int
    written: str = field(default="")


def directory(installation_id: uuid.UUID) -> str:
    """The journal's directory of one installation."""
    return f"{JOURNAL_PREFIX}{installation_id}/"


def segment_key(installation_id: uuid.UUID, first: int, last: int, written: datetime) -> str:
    """The key of a segment: numbers zero-padded, so that key order is journal order."""
    return f"{directory(installation_id)}{first:016d}-{last:016d}-{written.strftime('%Y%m%dT%H%M%SZ')}.jsonl"


def after_position(installation_id: uuid.UUID, position: int) -> str:
    """A listing start past every segment whose first entry is at or before `position`."""
    return f"{directory(installation_id)}{position:016d}~"


def parse_segment(key: str, installation_id: uuid.UUID) -> Segment | None:
    """A key of this installation's journal as a segment, or None."""
    base = directory(installation_id)
    if not key.startswith(base):
        return None
    match = _SEGMENT.fullmatch(key[len(base):])
    if not match:
        return None
    return Segment(key, int(match.group(1)), int(match.group(2)), match.group(3))


def installations(keys: Iterable[str]) -> set[str]:
    """The installation directories a listing of `journal/` shows."""
    found = set()
    for key in keys:
        parts = key[len(JOURNAL_PREFIX):].split("/", 1) if key.startswith(JOURNAL_PREFIX) else []
        if len(parts) == 2:
            found.add(parts[0])
    return found


@dataclass(frozen=True)
class GuardState:
    """Where a database stands against its journal."""

    position: int  # the last entry this database wrote or applied
    head: int  # the last entry the journal holds (position when nothing is newer)
    readable: bool = True

    @property
    def behind(self) -> bool:
        """The journal holds entries this database has not seen: it was restored from a backup."""
        return self.head > self.position

    @property
    def reason(self) -> str | None:
        """Why data requests must wait, or None."""
        if not self.readable:
            return "journal_unreadable"
        return "restore_pending" if self.behind else None
