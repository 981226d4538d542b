"""The deletion journal's sink: its segments as objects under `journal/<installation id>/` of the object store.
A segment is written once and never rewritten; it is read back by a restored database and removed only past
journal.retention (through the file facade, which never removes a key of a file's schema)."""

from __future__ import annotations

import uuid
from typing import Iterator, Sequence, cast

from app.domain.journal import JOURNAL_PREFIX, Segment, after_position, directory, parse_segment
from app.storage.base import DeleteFailure, ObjectStore, StoreMaintenance
from app.storage.files import FileStore


class JournalSink:
    """The journal of one installation in an object store."""

    def __init__(self, store: ObjectStore, installation_id: uuid.UUID):
        self.store = store
        self.installation_id = installation_id

    def write(self, key: str, text: str) -> None:
        """Write a segment (once: its key names its entries, no other writer holds them)."""
        data = text.encode()
        self.store.put(key, data, len(data), "application/x-ndjson")

    def segments_after(self, position: int) -> Iterator[Segment]:
        """The segments whose first entry comes after `position`, in journal order."""
        listing = cast(StoreMaintenance, self.store).list_prefix(directory(self.installation_id),
                                                                 after_position(self.installation_id, position))
        for listed in listing:
            segment = parse_segment(listed.key, self.installation_id)
            if segment is not None:
                yield segment

    def all_segments(self) -> Iterator[tuple[Segment, object]]:
        """Every segment with its listing (its last-modified time), for pruning."""
        for listed in cast(StoreMaintenance, self.store).list_prefix(directory(self.installation_id)):
            segment = parse_segment(listed.key, self.installation_id)
            if segment is not None:
                yield segment, listed.modified_at

    def read(self, segment: Segment) -> str:
        """A segment's text. Raises NotFound (app.errors) when it went (pruned) meanwhile."""
        return self.store.get(segment.key).decode()

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
            name = listed.key[len(JOURNAL_PREFIX):].split("/", 1)[0]
            if name != str(self.installation_id):
                found.add(name)
            after = f"{JOURNAL_PREFIX}{name}/~"

    def remove(self, segments: Sequence[Segment]) -> list[DeleteFailure]:
        """Remove segments past the journal's retention."""
        return FileStore(self.store).remove_unmanaged([segment.key for segment in segments])

