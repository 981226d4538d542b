"""Redaction (D6): kept, blanked and dropped members; properties with hypothesis."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.schemas import FileSchema
from app.domain.redaction import RedactionError, redact_file_event

CANARY = "salary-Canary-2026.xlsx"

files = st.fixed_dictionaries(
    {
        "id": st.uuids().map(str),
        "uploaded_by": st.uuids().map(str),
        "purpose": st.sampled_from(["attachment", "avatar", "branding", "gdpr_export"]),
        "original_name": st.text(min_size=1, max_size=50),
        "mime_type": st.sampled_from(["text/plain", "image/png"]),
        "size_bytes": st.integers(min_value=0, max_value=2**40),
        "upload_state": st.sampled_from(["uploading", "complete", "failed"]),
        "scan_status": st.sampled_from(["pending", "clean", "infected", "error", "skipped"]),
        "created_at": st.datetimes().map(lambda d: d.isoformat() + "+00:00"),
        "thumbnails": st.lists(st.text(max_size=10), max_size=3),
    },
    optional={
        "sha256": st.text("0123456789abcdef", min_size=64, max_size=64),
        "scope_id": st.uuids().map(str),
        "scanned_at": st.datetimes().map(lambda d: d.isoformat() + "+00:00"),
        "future_member": st.one_of(st.none(), st.text(), st.integers()),
    },
)


def holds_null(value) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(holds_null(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_null(item) for item in value)
    return False


@given(files)
def test_redacted_files_validate_hold_no_null_and_are_stable(file):
    redacted = redact_file_event("file.updated", 1, {"file": file})
    FileSchema().load(redacted["file"])
    text = json.dumps(redacted, sort_keys=True)
    assert not holds_null(redacted)
    again = redact_file_event("file.updated", 1, redacted)
    assert json.dumps(again, sort_keys=True) == text


@given(files)
def test_kept_blanked_and_dropped_members(file):
    redacted = redact_file_event("file.updated", 1, {"file": file})["file"]
    for name in ("id", "uploaded_by", "purpose", "upload_state", "scan_status", "created_at"):
        assert redacted[name] == file[name]
    assert redacted["original_name"] == "" and redacted["size_bytes"] == 0
    assert redacted["mime_type"] == "application/octet-stream" and redacted["thumbnails"] == []
    assert set(redacted) == {
        "id",
        "uploaded_by",
        "purpose",
        "upload_state",
        "scan_status",
        "created_at",
        "original_name",
        "size_bytes",
        "mime_type",
        "thumbnails",
    }


def test_no_name_or_digest_survives():
    file = {
        "id": "6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11",
        "uploaded_by": "6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a12",
        "purpose": "attachment",
        "original_name": CANARY,
        "mime_type": "application/vnd.ms-excel",
        "size_bytes": 1234,
        "upload_state": "complete",
        "scan_status": "clean",
        "created_at": "2026-01-01T00:00:00+00:00",
        "thumbnails": [CANARY],
        "sha256": "ab" * 32,
        "scope_id": "6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a13",
    }
    text = json.dumps(redact_file_event("file.updated", 1, {"file": file}))
    assert CANARY not in text and "ab" * 32 not in text and "ms-excel" not in text and "1234" not in text


@pytest.mark.parametrize("event_type, version", [("file.updated", 2), ("file.renamed", 1), ("file.deleted", 1)])
def test_unknown_types_and_versions_are_errors(event_type, version):
    with pytest.raises(RedactionError):
        redact_file_event(event_type, version, {"file": {}})


def test_a_payload_without_a_file_is_an_error():
    with pytest.raises(RedactionError):
        redact_file_event("file.updated", 1, {"other": 1})
