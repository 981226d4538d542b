"""The end of a file, as rules and values. Pure: no I/O.

One rule says whether a file's bytes may be removed now (`keep`): every removal of any object of a file (its
originals and variants, upload parts, a tus tail, an S3 multipart upload) asks it, through the store's file
facade, which removes nothing without a `Clearance` built from this rule. A legal hold keeps every byte,
whatever the path; an attached or slot-kept file, a live file, and a file in its uploader's own draft keep
their content.

The end of a file is a short sequence of typed events, each committed in the transaction that makes it true:
the mark (`FilesMarked`), the point of no return of its removal (`RemovalBegun`), its objects gone
(`ObjectsGone`), and its row removed (`RowsRemoved`). The consequences of an end (the receipt, the webhook,
hold accounting, the metrics) subscribe to them (app/lifecycle/ends.py) instead of being written into the
purge by hand.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime


class Reach(enum.Enum):
    """What a removal takes of a file."""

    FILE = "file"  # the file's bytes: originals, variants, parts and tail of an ended session, its multipart upload
    STRAY = "stray"  # copies no row counts of a file that lives on: parts written after its completion, a tail whose
    #                  bytes went into the last part, parts of a body that failed its checksum, and a copy in a store
    #                  that is not the file's own (the one a migration moved it from, or a copy that did not become it)


class Keep(enum.Enum):
    """Why a file's bytes stay."""

    HELD = "held"  # a legal hold covers the file (or its uploader): every byte stays until the release
    ATTACHED = "attached"  # a message names the file
    SLOT = "slot"  # an avatar or logo slot keeps the file
    DRAFT = "draft"  # its uploader's own draft names the file
    LIVE = "live"  # the file lives (uploading, scanning or deliverable): nobody deleted it


@dataclass(frozen=True)
class ByteFacts:
    """What the rule reads of one file, in one statement (app/db/keeps.py)."""

    file_id: uuid.UUID
    exists: bool  # a files row
    held: bool = False  # an active legal hold covers the file id or its uploader
    attached: bool = False
    in_slot: bool = False
    in_own_draft: bool = False
    deleted: bool = False
    ended: bool = False  # final and not deliverable (failed, infected, error): D7 purges its objects


def keep(facts: ByteFacts, reach: Reach) -> Keep | None:
    """Whether the bytes of a file may be removed now: None when they may go, else why they stay.

    A hold comes first and keeps everything, strays included (they are purged with the file after the
    release). A file without a row has nothing left to protect; an attached or slot-kept deleted row is an
    internal error that keeps its bytes too.
    """
    if facts.held:
        return Keep.HELD
    if reach is Reach.STRAY or not facts.exists:
        return None
    if facts.attached:
        return Keep.ATTACHED
    if facts.in_slot:
        return Keep.SLOT
    if facts.deleted or facts.ended:
        return None
    if facts.in_own_draft:
        return Keep.DRAFT
    return Keep.LIVE


@dataclass(frozen=True)
class Clearance:
    """The rule's answer for some files, for one reach: the files whose bytes may go now, and why the others
    stay. The store's file facade removes only the objects of `freed` files (app/storage/files.py); a
    clearance is built by the rule's one reader (app/db/keeps.py), right before the removal."""

    reach: Reach
    freed: frozenset[uuid.UUID]
    kept: Mapping[uuid.UUID, Keep] = field(default_factory=dict)

    def __contains__(self, file_id: object) -> bool:
        return file_id in self.freed

    def held(self) -> list[uuid.UUID]:
        """The files a legal hold keeps."""
        return sorted(file_id for file_id, why in self.kept.items() if why is Keep.HELD)


def clearance_of(facts: Iterable[ByteFacts], reach: Reach) -> Clearance:
    """Judge each file by the rule."""
    freed: set[uuid.UUID] = set()
    kept: dict[uuid.UUID, Keep] = {}
    for one in facts:
        why = keep(one, reach)
        if why is None:
            freed.add(one.file_id)
        else:
            kept[one.file_id] = why
    return Clearance(reach, frozenset(freed), kept)


# -- a file settled: ready, blocked, failed, or its variants ready ---------------------------------------------


@dataclass(frozen=True)
class FilesSettled:
    """These files became what `event_type` says (app/domain/webhooks.py SETTLED) in this transaction:
    deliverable, blocked, failed (with `reason`), or their variants ready (`variants`: their names)."""

    event_type: str
    file_ids: tuple[uuid.UUID, ...]
    at: datetime
    reason: str | None = None
    variants: tuple[str, ...] = ()


# -- the end of a file, as events ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesMarked:
    """Files marked deleted now (D5), by `via`, at `at`; committed with their purge job and, when the journal
    asked for it, with their journal entry (`journal_entry`: its installation and id), both written by the
    mark's own statement."""

    file_ids: tuple[uuid.UUID, ...]
    via: str
    at: datetime
    journal_entry: tuple[uuid.UUID, uuid.UUID] | None = None


@dataclass(frozen=True)
class RemovalBegun:
    """The point of no return: the removal of these files' bytes begins now (their rows record it)."""

    file_ids: tuple[uuid.UUID, ...]
    at: datetime


@dataclass(frozen=True)
class ObjectsGone:
    """The objects of these files are gone from the store (deleted files and final ones alike); `keys` counts
    the keys deleted per file."""

    file_ids: tuple[uuid.UUID, ...]
    at: datetime
    keys: Mapping[uuid.UUID, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RemovedRow:
    """One files row a purge removed: what its receipt is made of (never a name, digest or key)."""

    file_id: uuid.UUID
    uploaded_by: uuid.UUID
    via: str
    marked_at: datetime
    removal_begun_at: datetime | None
    keys_deleted: int
    variants_deleted: int = 0  # the image variants it had recorded (their keys are among keys_deleted)
    keys_locked: int = 0  # versions a store's object lock keeps: sealed, under a data key that no longer exists
    stores: tuple[str, ...] = ("default",)  # the stores its objects were removed from, its own first


@dataclass(frozen=True)
class RowsRemoved:
    """Rows of deleted files removed now, after their objects went (D7)."""

    rows: tuple[RemovedRow, ...]
    at: datetime

    @property
    def file_ids(self) -> list[uuid.UUID]:
        """The ids of the removed rows."""
        return [row.file_id for row in self.rows]
