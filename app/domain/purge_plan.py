"""What a purge does with one file (D7). Pure.

- no row: nothing;
- deleted: objects, then the row;
- final and not deliverable (failed, infected, error): objects only, the row stays for the uploader;
- anything else (uploading, scan pending, deliverable): nothing, so a stray job never touches a live file.

What it removes is the file's objects (objects_of, app/domain/objects.py).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from app.domain.objects import FileObjects
from app.domain.states import is_deliverable, is_final
from app.domain.uploads import TUS


class PurgeAction(enum.Enum):
    NOTHING = "nothing"
    OBJECTS = "objects"
    OBJECTS_AND_ROW = "objects_and_row"


@dataclass(frozen=True)
class PurgeFacts:
    """What a purge reads about one file, without a transaction."""

    file_id: uuid.UUID
    exists: bool
    deleted_at: datetime | None = None
    upload_state: str = "uploading"
    scan_status: str = "pending"
    object_key: str | None = None
    session_state: str | None = None
    storage_upload_id: str | None = None
    part_count: int = 0
    protocol: str | None = None  # the session's (a Protocol's name, app/domain/uploads.py); None: no session
    encrypted: bool = False  # its objects are sealed under its own data key
    store: str = "default"  # the store that holds its objects
    copies: list[str] = field(default_factory=list)  # other stores that may hold some (store_copies)

    @property
    def stores(self) -> list[str]:
        """Every store that may hold objects of the file: its own first, then those a migration copied it to or
        from."""
        return [self.store, *(name for name in self.copies if name != self.store)]


def plan_purge(facts: PurgeFacts) -> PurgeAction:
    """What a purge does with a file (the module's table): nothing, objects only, or objects and row."""
    if not facts.exists:
        return PurgeAction.NOTHING
    if facts.deleted_at is not None:
        return PurgeAction.OBJECTS_AND_ROW
    if is_final(facts.upload_state, facts.scan_status) and not is_deliverable(facts.upload_state, facts.scan_status):
        return PurgeAction.OBJECTS
    return PurgeAction.NOTHING


def has_parts(facts: PurgeFacts) -> bool:
    """Whether the file may still have upload parts (fs part keys, or an S3 multipart upload): every
    session that did not complete."""
    return facts.session_state is not None and facts.session_state != "completed"


def objects_of(facts: PurgeFacts, store: str | None = None) -> FileObjects:
    """What the file owns in the store, as its purge removes it: originals and variants, the parts and the
    multipart upload of a session that did not complete, the tail of a tus upload whatever its session's state
    (a tail left by a completion that could not remove it goes with its file).

    Raises:
        KeySchemaError: the stored key is not an original of this file: nothing is deleted on its strength (K3).
    """
    return FileObjects(
        facts.file_id,
        facts.object_key,
        upload_id=facts.storage_upload_id,
        part_count=facts.part_count,
        parts_open=has_parts(facts),
        tail=facts.protocol == TUS.name,
        sealed=facts.encrypted,
        store=facts.store if store is None else store,
    )
