"""What a purge does with one file (D7). Pure.

- no row: nothing;
- deleted: objects, then the row;
- final and not deliverable (failed, infected, error): objects only, the row stays for the uploader;
- anything else (uploading, scan pending, deliverable): nothing, so a stray job never touches a live file.

The keys: the originals and variants of the file (object_keys_of), the parts of an unfinished session
(has_parts), and the tail of a tus upload (tail_keys_of), whatever its session's state: a tail left by a
completion that could not remove it goes with its file.
"""

from __future__ import annotations

import enum
import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from app.domain.keys import FILES_PREFIX, VARIANTS, KeyError_, original_key, tail_key, variant_key
from app.domain.states import is_deliverable, is_final


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
    protocol: str | None = None  # the session's: native or tus (issue 25)


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


def tail_keys_of(facts: PurgeFacts) -> list[str]:
    """The tail key of a file uploaded through tus (`uploads/<id>/tail`, issue 25), else nothing: a tail is
    written by tus PATCH requests only."""
    return [tail_key(facts.file_id)] if facts.protocol == "tus" else []


_ORIGINAL = re.compile(r"^f/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f-]{36})/orig-([1-9][0-9]{0,8})$")


def object_keys_of(file_id: uuid.UUID | str, object_key: str | None) -> list[str]:
    """Every object key a file may have: its originals orig-1..orig-(r+1) (r from the stored key; r+1
    covers an original written but not yet referenced) and the four variants.

    Raises:
        KeyError_: the stored key is not an original of this file (another file's key, a variant or part
            key, or malformed): nothing must be deleted on the strength of it.
    """
    canonical = uuid.UUID(str(file_id))
    if object_key is None:
        revision = 0
    else:
        match = _ORIGINAL.fullmatch(object_key)
        if not match or match.group(3) != str(canonical) or not object_key.startswith(FILES_PREFIX):
            raise KeyError_("the stored key is not an original of this file")
        if (match.group(1), match.group(2)) != (canonical.hex[0:2], canonical.hex[2:4]):
            raise KeyError_("the stored key's directories do not match the file id")
        revision = int(match.group(4))
    originals = [original_key(canonical, r) for r in range(1, revision + 2)]
    return originals + [variant_key(canonical, name) for name in VARIANTS]
