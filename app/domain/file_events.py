"""The `file.updated` event (D3): one to the uploader for every change of upload_state or scan_status, schema
version 1, payload {"file": File}. Pure: the File document of a files row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from app.domain.states import shown_scan_status
from app.domain.variants import thumbnails_document

FILE_UPDATED = "file.updated"
FILE_UPDATED_VERSION = 1


def file_document(row: Any) -> dict[str, Any]:
    """The File representation of a files row: JSON-ready, no null members (absent instead)."""
    doc: dict[str, Any] = {
        "id": str(row.id),
        "uploaded_by": str(row.uploaded_by),
        "purpose": row.purpose,
        "original_name": row.original_name,
        "mime_type": row.mime_type,
        "size_bytes": row.size_bytes,
        "upload_state": row.upload_state,
        "scan_status": shown_scan_status(row.upload_state, row.scan_status),
        "created_at": _iso(row.created_at),
        "thumbnails": thumbnails_document(list(getattr(row, "thumbnails", None) or [])),
    }
    if row.sha256:
        doc["sha256"] = row.sha256
    if row.scope_id:
        doc["scope_id"] = str(row.scope_id)
    if row.scanned_at:
        doc["scanned_at"] = _iso(row.scanned_at)
    return doc


def _iso(moment: datetime) -> str:
    return moment.isoformat()
