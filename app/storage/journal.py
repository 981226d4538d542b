"""The deletion journal's sink: its segments and its spool as objects under `journal/<installation id>/` of the
object store. A segment is written once (written again only by a writer taking over its claim, with the same
text) and read back by a restored database; segments are removed only past journal.retention, spool objects once
their entries are numbered (through the file facade, which never removes a key of a file's schema)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from app.domain.journal import (
    JOURNAL_PREFIX,
    Segment,
    after_position,
    directory,
    is_spooled,
    parse_segment,
    segment_key,
)
from app.errors import NotFound
from app.storage.base import DeleteFailure, ObjectStore, StoreMaintenance
from app.storage.files import FileStore


@dataclass(frozen=True)
class Listing:
    """What the journal holds past a position: its segments in journal order, and its spool."""

    segments: list[Segment] = field(default_factory=list)
    spooled: list[str] = field(default_factory=list)


class JournalSink:
    """The journal of one installation in an object store."""

    def __init__(self, store: ObjectStore, installation_id: uuid.UUID):
        self.store = store
        self.installation_id = installation_id

    def write(self, key: str, text: str) -> None:
        """Write a segment or a spool object."""
        data = text.encode()
        self.store.put(key, data, len(data), "application/x-ndjson")

    def existing(self, first: int) -> str | None:
        """The text of the segment whose first entry is `first`, or None when the journal holds none (one read:
        its key is known)."""
        try:
            return self.store.get(segment_key(self.installation_id, first)).decode()
        except NotFound:
            return None

    def after(self, position: int) -> Listing:
        """The segments whose first entry comes after `position`, in journal order, and the spool."""
        listing = cast(StoreMaintenance, self.store).list_prefix(
            directory(self.installation_id), after_position(self.installation_id, position)
        )
        found = Listing()
        for listed in listing:
            segment = parse_segment(listed.key, self.installation_id)
            if segment is not None:
                found.segments.append(segment)
            elif is_spooled(listed.key, self.installation_id):
                found.spooled.append(listed.key)
        found.segments.sort(key=lambda segment: (segment.first, segment.key))
        return found

    def segments_after(self, position: int) -> Iterator[Segment]:
        """The segments whose first entry comes after `position`, in journal order."""
        yield from self.after(position).segments

    def all_segments(self) -> Iterator[tuple[Segment, datetime | None]]:
        """Every segment with its listing (its last-modified time), for pruning."""
        for listed in cast(StoreMaintenance, self.store).list_prefix(directory(self.installation_id)):
            segment = parse_segment(listed.key, self.installation_id)
            if segment is not None:
                yield segment, listed.modified_at if isinstance(listed.modified_at, datetime) else None

    def read(self, key: str) -> str:
        """A segment's (or spool object's) text. Raises NotFound (app.errors) when it went meanwhile."""
        return self.store.get(key).decode(errors="replace")

    def others(self) -> set[str]:
        """The installation directories of `journal/` that are not this installation's (at most a few keys
        are read: one per installation)."""
        found: set[str] = set()
        after = ""
        maintenance = cast(StoreMaintenance, self.store)
        while True:
            listed = next(iter(maintenance.list_prefix(JOURNAL_PREFIX, after)), None)
            if listed is None:
                return found
            name = listed.key[len(JOURNAL_PREFIX) :].split("/", 1)[0]
            if name != str(self.installation_id):
                found.add(name)
            after = f"{JOURNAL_PREFIX}{name}/~"

    def remove(self, keys: Sequence[str]) -> list[DeleteFailure]:
        """Remove segments past the journal's retention, or spool objects whose entries are numbered."""
        return FileStore(self.store).remove_unmanaged(list(keys))
