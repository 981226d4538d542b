"""File states (D3). Pure.

- deliverable: complete, and scan clean or skipped;
- final: failed, or complete with a scan outcome (clean, infected, error, skipped);
- blocked: complete and scanned infected or error.
"""

from __future__ import annotations

UPLOAD_STATES = ("uploading", "complete", "failed")
SCAN_STATUSES = ("pending", "clean", "infected", "error", "skipped")
# What clients see for a failed upload whose scan never ran: not `pending`, which would wait forever.
NOT_SCANNED = "not_scanned"
SHOWN_SCAN_STATUSES = SCAN_STATUSES + (NOT_SCANNED,)


def shown_scan_status(upload_state: str, scan_status: str) -> str:
    """The scan status as clients see it: a failed upload is never scanned, and says so."""
    return NOT_SCANNED if upload_state == "failed" and scan_status == "pending" else scan_status


PURPOSES = ("attachment", "avatar", "branding", "gdpr_export")
SESSION_STATES = ("open", "completed", "aborted", "expired")


def is_deliverable(upload_state: str, scan_status: str) -> bool:
    """Complete and scanned clean or skipped: the only state a file is served or attached in."""
    return upload_state == "complete" and scan_status in ("clean", "skipped")


def is_final(upload_state: str, scan_status: str) -> bool:
    """Failed, or complete with a scan outcome: no more change but deletion."""
    return upload_state == "failed" or (upload_state == "complete" and scan_status != "pending")


def is_blocked(upload_state: str, scan_status: str) -> bool:
    """Complete and infected or errored: final, never deliverable."""
    return upload_state == "complete" and scan_status in ("infected", "error")


def awaits_scan(upload_state: str, scan_status: str, deleted: bool) -> bool:
    """Complete, not deleted, scan still pending: the only state a scan outcome may be written in."""
    return not deleted and upload_state == "complete" and scan_status == "pending"


def checked_outcome(outcome: str, measured: tuple[int, str], size_bytes: int, expected_sha256: str | None) -> str:
    """The outcome of a scan that measured the bytes it read (a direct upload's object, which no server of
    Lethe's saw arrive): `failed` when their size or digest is not the declared one, whatever the scanner said;
    else the scanner's outcome."""
    size, digest = measured
    if size != size_bytes or (expected_sha256 is not None and digest != expected_sha256):
        return "failed"
    return outcome
