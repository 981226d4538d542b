"""The deletion journal, as rules and values. Pure: no I/O.

Every committed end of a file (marked deleted, objects gone, row removed), every completed erasure, and every
legal hold placed or released becomes an entry: ids, a kind and a time, never a name, a key or a digest of a
file. A person appears only as a keyed hash (`subject_hash`): enough to recognise them in a restored database,
nothing more.

Entries are numbered (`seq`) when they are written to the journal, in segments named by their first number, so
that a database that has seen up to `position` knows at once whether the journal holds more: a database behind
its journal was restored from a backup. A segment opens with a header that states its numbers, the digest of its
entries and the digest of the segment before it: a segment cut short, garbled or edited is found by reading it,
and one that went missing or was replaced by reading the next one (whose header a damage of the first cannot
reach). Segments written before headers existed (keys `<first>-<last>-<written>.jsonl`) are read by their
numbers alone.

An entry whose database could not be reached when it was to be numbered (the database's host lost right after
the commit) is written unnumbered to the journal's spool by the process that committed it, from its memory, so
that a database restored after such a loss still finds it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JOURNAL_PREFIX = "journal/"
FILE_MARKED, OBJECTS_GONE, ROW_REMOVED = "file.marked", "file.objects_gone", "file.row_removed"
ERASURE_COMPLETED, HOLD_PLACED, HOLD_RELEASED = "erasure.completed", "hold.placed", "hold.released"
# A migration moved a file to another store (`store` names it): a database restored from before the move is told
# where the file's objects are now.
FILE_MOVED = "file.moved"
KINDS = (FILE_MARKED, OBJECTS_GONE, ROW_REMOVED, ERASURE_COMPLETED, HOLD_PLACED, HOLD_RELEASED, FILE_MOVED)
FILE_KINDS = (FILE_MARKED, OBJECTS_GONE, ROW_REMOVED)
SEGMENT_FORMAT = 1
SPOOL = "spool/"
_LEGACY_SEGMENT = re.compile(r"^([0-9]{16})-([0-9]{16})-([0-9]{8}T[0-9]{6}Z)\.jsonl$")
_SEGMENT = re.compile(r"^([0-9]{16})\.jsonl$")
_SPOOLED = re.compile(r"^spool/([0-9a-f-]{36})\.jsonl$")


def subject_hash(key: str, subject_id: uuid.UUID) -> str:
    """A person as the journal names them: HMAC-SHA256 of their id under the journal key (hex)."""
    return hmac.new(key.encode(), uuid.UUID(str(subject_id)).bytes, hashlib.sha256).hexdigest()


def digest(text: str) -> str:
    """The SHA-256 of a segment's text (or of its entries), hex: a segment's integrity, never a file's."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One journal entry: a kind, when it committed, and ids (files, a hold, an erasure, a person's hash).

    `id` names the entry from its commit on (a spooled entry is matched with the database by it); `seq` is its
    number in the journal, given when a segment takes it."""

    kind: str
    at: datetime
    files: tuple[uuid.UUID, ...] = ()
    via: str | None = None
    subject: str | None = None  # a keyed hash, never an id
    hold: uuid.UUID | None = None
    erasure: uuid.UUID | None = None
    case_ref: str | None = None  # an opaque ticket number (holds.case_ref_pattern), never a name
    store: str | None = None  # a store's name (file.stores), of a file.moved entry
    seq: int = 0
    id: uuid.UUID | None = None

    def body(self) -> dict[str, Any]:
        """The entry's members as stored before it is numbered (JSON-ready, no null)."""
        doc: dict[str, Any] = {}
        if self.files:
            doc["files"] = [str(file_id) for file_id in self.files]
        for name in ("via", "subject", "case_ref", "store"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        for name in ("hold", "erasure"):
            if getattr(self, name) is not None:
                doc[name] = str(getattr(self, name))
        return doc


def line(entry: Entry, with_id: bool = False) -> str:
    """An entry as one line of a segment (with its id: of the spool)."""
    doc: dict[str, Any] = {"seq": entry.seq, "kind": entry.kind, "at": entry.at.isoformat(), **entry.body()}
    if with_id and entry.id is not None:
        doc["id"] = str(entry.id)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def entry_of(kind: str, at: datetime, body: dict[str, Any], seq: int = 0, entry_id: uuid.UUID | None = None) -> Entry:
    """An entry from its kind, time and stored members (Entry.body()). Raises ValueError for members of the wrong
    form."""
    try:
        return Entry(
            kind=kind,
            at=at,
            files=tuple(uuid.UUID(file_id) for file_id in body.get("files", [])),
            via=body.get("via"),
            subject=body.get("subject"),
            hold=uuid.UUID(body["hold"]) if "hold" in body else None,
            erasure=uuid.UUID(body["erasure"]) if "erasure" in body else None,
            case_ref=body.get("case_ref"),
            store=body.get("store"),
            seq=seq,
            id=entry_id,
        )
    except (TypeError, ValueError, AttributeError):
        raise ValueError("a member of the entry has the wrong form") from None


def parse_line(text: str) -> Entry:
    """One line of a segment back into an entry. Raises ValueError for a line that is not one."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError("not JSON") from None
    if (
        not isinstance(doc, dict)
        or doc.get("kind") not in KINDS
        or not isinstance(doc.get("seq"), int)
        or not isinstance(doc.get("at"), str)
    ):
        raise ValueError("not a journal entry")
    try:
        at = datetime.fromisoformat(doc["at"])
        entry_id = uuid.UUID(doc["id"]) if "id" in doc else None
    except (TypeError, ValueError, AttributeError):
        raise ValueError("a member of the entry has the wrong form") from None
    return entry_of(doc["kind"], at, doc, doc["seq"], entry_id)


@dataclass(frozen=True)
class Segment:
    """A segment's place in the journal, from its key: its first entry (and its last, for a segment written
    before headers existed: newer segments state it in their header)."""

    key: str
    first: int
    last: int | None = None
    written: str = field(default="")

    @property
    def legacy(self) -> bool:
        """Written before segments had headers (its numbers are in its key)."""
        return self.last is not None


@dataclass(frozen=True)
class Damage:
    """What is wrong with the journal past a database's position: the segment (or the missing numbers) and the
    line, so an operator can find it, mend it, or accept its loss."""

    where: str  # a segment's key, or `<directory><first>-<last> (missing)` for numbers no segment holds
    what: str
    line: int | None = None

    def describe(self) -> str:
        """One line for an operator."""
        at = f", line {self.line}" if self.line is not None else ""
        return f"{self.where}{at}: {self.what}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"where": self.where, "what": self.what, "line": self.line}


class SegmentDamaged(ValueError):
    """A segment that does not verify (or numbers no segment holds)."""

    def __init__(self, damage: Damage):
        super().__init__(damage.describe())
        self.damage = damage


def directory(installation_id: uuid.UUID | str) -> str:
    """The journal's directory of one installation."""
    return f"{JOURNAL_PREFIX}{installation_id}/"


def segment_key(installation_id: uuid.UUID, first: int) -> str:
    """The key of the segment whose first entry is `first`: zero-padded, so that key order is journal order, and
    known before it is written (a restored database about to number an entry the journal holds finds it)."""
    return f"{directory(installation_id)}{first:016d}.jsonl"


def legacy_segment_key(installation_id: uuid.UUID, first: int, last: int, written: datetime) -> str:
    """The key of a segment written before segments had headers (read, never written any more)."""
    return f"{directory(installation_id)}{first:016d}-{last:016d}-{written.strftime('%Y%m%dT%H%M%SZ')}.jsonl"


def spool_key(installation_id: uuid.UUID, spool_id: uuid.UUID) -> str:
    """The key of a spool object: entries committed and not yet numbered, written by the process that committed
    them when it could not reach the database."""
    return f"{directory(installation_id)}{SPOOL}{spool_id}.jsonl"


def escrow_key(installation_id: uuid.UUID | str) -> str:
    """The key of the journal's hash key, wrapped by the keyring: a database restored from a backup older than its
    journal adopts the journal and needs the key its persons were hashed with (the database that made it is gone)."""
    return f"{directory(installation_id)}hash-key.json"


def escrow_binding(installation_id: uuid.UUID) -> uuid.UUID:
    """The id the escrowed hash key is wrapped under (bound to its installation, apart from any file's id)."""
    return uuid.uuid5(installation_id, "lethe.journal.hash_key")


def after_position(installation_id: uuid.UUID, position: int) -> str:
    """A listing start past every segment whose first entry is at or before `position` (the spool sorts after
    every segment, so it is listed too)."""
    return f"{directory(installation_id)}{position:016d}~"


def parse_segment(key: str, installation_id: uuid.UUID) -> Segment | None:
    """A key of this installation's journal as a segment, or None."""
    base = directory(installation_id)
    if not key.startswith(base):
        return None
    name = key[len(base) :]
    match = _SEGMENT.fullmatch(name)
    if match:
        return Segment(key, int(match.group(1)))
    legacy = _LEGACY_SEGMENT.fullmatch(name)
    if legacy:
        return Segment(key, int(legacy.group(1)), int(legacy.group(2)), legacy.group(3))
    return None


def is_spooled(key: str, installation_id: uuid.UUID) -> bool:
    """Whether a key of this installation's journal is a spool object."""
    base = directory(installation_id)
    return key.startswith(base) and _SPOOLED.fullmatch(key[len(base) :]) is not None


def installations(keys: Iterable[str]) -> set[str]:
    """The installation directories a listing of `journal/` shows."""
    found = set()
    for key in keys:
        parts = key[len(JOURNAL_PREFIX) :].split("/", 1) if key.startswith(JOURNAL_PREFIX) else []
        if len(parts) == 2:
            found.add(parts[0])
    return found


# -- writing and reading segments ------------------------------------------------------------------------------


def render_segment(first: int, last: int, prev: str | None, entries: Sequence[Entry]) -> str:
    """A segment's text: its header (numbers, the digest of its entries, the digest of the segment before it),
    then one line per entry. The same entries give the same text (a segment written again is the same)."""
    body = "".join(line(entry) + "\n" for entry in entries)
    header = json.dumps(
        {"journal": SEGMENT_FORMAT, "first": first, "last": last, "prev": prev, "entries": digest(body)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return header + "\n" + body


def render_spool(entries: Sequence[Entry]) -> str:
    """A spool object's text: unnumbered entries with their ids."""
    return "".join(line(entry, with_id=True) + "\n" for entry in entries)


@dataclass(frozen=True)
class ReadSegment:
    """A segment read and verified."""

    segment: Segment
    first: int
    last: int
    prev: str | None  # the digest its header says the segment before it has (None: not stated)
    digest: str  # the digest of its whole text (what the next segment's header states)
    entries: tuple[Entry, ...]


def read_segment(segment: Segment, text: str, accept: bool = False) -> ReadSegment:
    """Verify a segment and return its entries: its header (when it has one) states its numbers and the digest of
    its entries, every line is an entry, and the entries are numbered exactly first..last in order.

    Args:
        accept: the operator accepted this segment's damage: every line that is an entry of its range is taken,
            the rest left out.

    Raises:
        SegmentDamaged: naming the segment and the line.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    else:
        _damaged(segment, "the segment does not end with a whole line (cut short?)", len(lines), accept)
    first, last, prev, offset = segment.first, segment.last, None, 0
    if not segment.legacy:
        header = _header(segment, lines[0] if lines else "", accept)
        offset = 1
        if header is not None:
            first, last, prev = header["first"], header["last"], header.get("prev")
            body = "".join(text_line + "\n" for text_line in lines[1:])
            if first != segment.first:
                _damaged(segment, "the header's first number differs from the key's", 1, accept)
            if digest(body) != header["entries"]:
                _damaged(
                    segment, "its entries do not have the digest its header states (edited or damaged)", None, accept
                )
    entries: list[Entry] = []
    expected = first
    for number, text_line in enumerate(lines[offset:], start=offset + 1):
        try:
            entry = parse_line(text_line)
        except ValueError as exc:
            _damaged(segment, f"the line is no journal entry ({exc})", number, accept)
            continue
        if entry.seq != expected:
            _damaged(segment, f"entry {expected} was expected, the line holds entry {entry.seq}", number, accept)
            if accept and (entry.seq < first or (last is not None and entry.seq > last)):
                continue
        entries.append(entry)
        expected = entry.seq + 1
    end = last if last is not None else expected - 1
    if expected - 1 != end and not accept:
        _damaged(
            segment, f"it holds entries {first}..{expected - 1} where its numbers say {first}..{end}", None, accept
        )
    return ReadSegment(segment, first, end, prev, digest(text), tuple(entries))


def _header(segment: Segment, text: str, accept: bool) -> dict[str, Any] | None:
    try:
        header = json.loads(text)
    except json.JSONDecodeError:
        header = None
    if (
        not isinstance(header, dict)
        or header.get("journal") != SEGMENT_FORMAT
        or not isinstance(header.get("first"), int)
        or not isinstance(header.get("last"), int)
        or not isinstance(header.get("entries"), str)
        or not (header.get("prev") is None or isinstance(header.get("prev"), str))
    ):
        _damaged(segment, "the first line is no segment header", 1, accept)
        return None
    return header


def _damaged(segment: Segment, what: str, number: int | None, accept: bool) -> None:
    if not accept:
        raise SegmentDamaged(Damage(segment.key, what, number))


def read_spool(key: str, text: str) -> list[Entry]:
    """A spool object's entries (each with its id).

    Raises:
        SegmentDamaged: naming the object and the line.
    """
    entries = []
    for number, text_line in enumerate(text.splitlines(), start=1):
        if not text_line.strip():
            continue
        try:
            entry = parse_line(text_line)
        except ValueError as exc:
            raise SegmentDamaged(Damage(key, f"the line is no journal entry ({exc})", number)) from None
        if entry.id is None:
            raise SegmentDamaged(Damage(key, "a spooled entry has no id", number))
        entries.append(entry)
    return entries


def chain(
    position: int, known_digest: str | None, read: Sequence[ReadSegment], accepted: frozenset[str] = frozenset()
) -> None:
    """Check that the segments past `position` follow each other: each starts where the one before ended (no
    numbers missing), and each states the digest the one before it has (none was replaced).

    Args:
        known_digest: the digest of the segment at `position`, when the database knows it.
        accepted: damage the operator accepted (a segment's key, or a missing range as `chain` names it).

    Raises:
        SegmentDamaged: the first break, naming the missing numbers or the segment.
    """
    expected, previous = position + 1, known_digest
    for item in sorted(read, key=lambda found: found.first):
        if previous is not None and previous in accepted_digests(read, accepted):
            previous = None  # the segment before was accepted damaged: its digest says nothing any more
        if item.last < expected:
            continue  # all of it at or before the position (or a legacy segment written twice)
        if item.first > expected:
            where = f"{directory_of(item.segment.key)}{expected:016d}-{item.first - 1:016d} (missing)"
            if where not in accepted:
                raise SegmentDamaged(Damage(where, f"no segment holds entries {expected}..{item.first - 1}"))
        elif (
            item.prev is not None
            and previous is not None
            and item.prev != previous
            and item.segment.key not in accepted
        ):
            raise SegmentDamaged(
                Damage(
                    item.segment.key,
                    "the segment before it is not the one it was written "
                    "after (its digest differs: replaced or edited)",
                    1,
                )
            )
        expected, previous = item.last + 1, item.digest


def accepted_digests(read: Sequence[ReadSegment], accepted: frozenset[str]) -> set[str]:
    """The digests of segments whose damage was accepted."""
    return {item.digest for item in read if item.segment.key in accepted}


def directory_of(key: str) -> str:
    """The installation directory a journal key is in."""
    return key[: len(JOURNAL_PREFIX) + 37]


# What each reason of the restore guard means, for the 503 answers and /readyz.
GUARD_DETAIL = {
    "restore_pending": "The database was restored from a backup and is behind its deletion journal; requests "
    "are answered once the journal is applied again (lethe restore status).",
    "journal_unreadable": "The deletion journal cannot be read, so the service cannot tell whether its database "
    "was restored; requests are answered once it can.",
    "journal_damaged": "The deletion journal is damaged past the database's position, so the service cannot tell "
    "what was deleted after its backup; requests are answered once it is mended (lethe restore "
    "status names the segment).",
    "journal_adoption_pending": "The database is older than its deletion journal and the store holds another "
    "installation's journal; requests are answered once it is adopted or refused "
    "(lethe restore status).",
}


@dataclass(frozen=True)
class GuardState:
    """Where a database stands against its journal."""

    position: int  # the last entry this database wrote or applied
    head: int  # the last entry the journal holds (position when nothing is newer)
    readable: bool = True
    unknown_spooled: int = 0  # spooled entries this database does not know (it was restored after their commit)
    damaged: Damage | None = None
    adoptable: tuple[str, ...] = ()  # other installations' journals a database older than its own may belong to

    @property
    def behind(self) -> bool:
        """The journal holds entries this database has not seen: it was restored from a backup."""
        return self.head > self.position or self.unknown_spooled > 0

    @property
    def reason(self) -> str | None:
        """Why data requests must wait, or None."""
        if not self.readable:
            return "journal_unreadable"
        if self.damaged is not None:
            return "journal_damaged"
        if self.adoptable:
            return "journal_adoption_pending"
        return "restore_pending" if self.behind else None
