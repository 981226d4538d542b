"""Redaction of stored events (D6). Pure.

A stored `file.updated` (schema version 1) keeps id, uploaded_by, purpose, upload_state, scan_status and
created_at; sets original_name to "", size_bytes to 0, mime_type to application/octet-stream and thumbnails
to []; and drops every other member (sha256, scope_id, scanned_at, anything newer). The result still
validates against the File schema, holds no null, and redacting it again gives the same bytes.

Any other event type or version on resource kind `file` is an error that fails the deleting transaction:
a new type must define its redaction here first.
"""

from __future__ import annotations

from typing import Any

KEPT = ("id", "uploaded_by", "purpose", "upload_state", "scan_status", "created_at")
BLANKED: dict[str, Any] = {
    "original_name": "",
    "size_bytes": 0,
    "mime_type": "application/octet-stream",
    "thumbnails": [],
}
REDACTABLE = {("file.updated", 1)}


class RedactionError(ValueError):
    """An event on kind `file` that no rule here knows how to redact."""


def redact_file_event(event_type: str, schema_version: int, payload: Any) -> dict[str, Any]:
    """The redacted payload of a stored event on resource kind `file`.

    Raises:
        RedactionError: another type or version, or a payload without a file object.
    """
    if (event_type, schema_version) not in REDACTABLE:
        raise RedactionError("no redaction rule for this event type and version")
    if not isinstance(payload, dict) or not isinstance(payload.get("file"), dict):
        raise RedactionError("a file.updated payload holds a file object")
    source = payload["file"]
    missing = [name for name in KEPT if source.get(name) is None]
    if missing:
        raise RedactionError("the stored file lacks a member that redaction keeps")
    redacted = {name: source[name] for name in KEPT}
    redacted.update({name: (list(value) if isinstance(value, list) else value) for name, value in BLANKED.items()})
    return {"file": redacted}
