"""The documents Lethe answers with, one frozen dataclass per schema of /openapi.json (its components), each
field one of the schema's properties: a test of the repository fails when they drift apart. Times are read as
timezone-aware datetimes; a property a newer server adds is ignored until the client knows it."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Thumbnail:
    name: str
    width: int
    height: int
    type: str


@dataclass(frozen=True)
class File:
    id: str
    purpose: str
    original_name: str
    mime_type: str
    size_bytes: int
    upload_state: str  # uploading, complete, failed
    scan_status: str  # pending, clean, infected, error, skipped, not_scanned
    created_at: datetime
    uploaded_by: str | None = None
    thumbnails: list[Thumbnail] = field(default_factory=list)
    sha256: str | None = None
    scope_id: str | None = None
    scanned_at: datetime | None = None

    @property
    def ready(self) -> bool:
        """Deliverable: complete, and its scan found it clean (or no scanner is configured)."""
        return self.upload_state == "complete" and self.scan_status in ("clean", "skipped")


@dataclass(frozen=True)
class Part:
    part_number: int
    size_bytes: int


@dataclass(frozen=True)
class PartUrl:
    number: int
    url: str
    expires_at: datetime


@dataclass(frozen=True)
class Upload:
    file_id: str
    transfer: str  # parts, tus, direct
    state: str  # open, completed, aborted, expired
    part_size: int
    part_count: int
    expires_at: datetime
    parts_received: list[int] = field(default_factory=list)
    parts: list[PartUrl] = field(default_factory=list)  # a direct upload's part URLs
    completed_at: datetime | None = None


@dataclass(frozen=True)
class UploadView:
    file: File
    upload: Upload


@dataclass(frozen=True)
class BatchDeleteResult:
    id: str
    status: int  # 204 deleted, else the status deleteFile answers for that file
    reason: str | None = None


@dataclass(frozen=True)
class Link:
    url: str
    expires_at: datetime


@dataclass(frozen=True)
class Message:
    id: str
    author_id: str
    created_at: datetime
    file_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Draft:
    key: str
    text: str
    updated_at: datetime
    file_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    id: int
    type: str
    schema_version: int
    resource_kind: str
    resource_id: str
    created_at: datetime
    redacted: bool
    payload: dict[str, Any]
    actor_id: str | None = None


@dataclass(frozen=True)
class Receipt:
    file_id: str
    via: str
    marked_at: datetime
    purged_at: datetime
    keys_deleted: int
    keys_confirmed_absent: int
    deferred_by_hold: str | None = None
    deferred_from: datetime | None = None
    deferred_until: datetime | None = None
    removal_began_at: datetime | None = None
    hold_too_late: bool | None = None
    variants_deleted: int | None = None
    keys_locked: int | None = None
    stores: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Erasure:
    id: str
    state: str  # running, complete, failed
    created_at: datetime
    files_marked: int
    files_purged: int
    keys_confirmed_absent: int
    messages_removed: int
    drafts_removed: int
    receipts: list[Receipt] = field(default_factory=list)
    reason: str | None = None
    subject_id: str | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class Hold:
    id: str
    case_ref: str
    created_at: datetime
    files_deferred: int
    files_lost: int
    subject_forgotten: bool
    subject_id: str | None = None
    file_id: str | None = None
    released_at: datetime | None = None


@dataclass(frozen=True)
class Usage:
    principal_id: str
    bytes: dict[str, Any]
    files: dict[str, Any]
    awaiting_purge: dict[str, Any]
    held_by_holds: dict[str, Any]
    purposes: dict[str, Any]
    quota: dict[str, Any] | None = None


@dataclass(frozen=True)
class Explanation:
    file_id: str
    state: str
    kept_by: list[Any]
    ends: dict[str, Any]
    bytes_may_go: bool | None = None
    the_one_rule: str | None = None
    upload_state: str | None = None
    scan_status: str | None = None
    purpose: str | None = None
    uploaded_by: str | None = None
    store: str | None = None
    receipt: dict[str, Any] | None = None


# The schema of /openapi.json each model reads.
MODELS: dict[str, type] = {
    "Thumbnail": Thumbnail,
    "File": File,
    "Part": Part,
    "PartUrl": PartUrl,
    "Upload": Upload,
    "UploadView": UploadView,
    "BatchDeleteResult": BatchDeleteResult,
    "Link": Link,
    "Message": Message,
    "Draft": Draft,
    "Event": Event,
    "Receipt": Receipt,
    "Erasure": Erasure,
    "Hold": Hold,
    "Usage": Usage,
    "Explanation": Explanation,
}


def load(cls: type[T], data: Any) -> T:
    """A model from a JSON document: its known properties, converted by the field's type."""
    hints = typing.get_type_hints(cls)
    values = {
        one.name: _convert(hints[one.name], data[one.name])
        for one in dataclasses.fields(cls)  # type: ignore[arg-type]
        if one.name in data
    }
    return cls(**values)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, one) for one in value]
    if hint is datetime:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return load(hint, value)
    return value
