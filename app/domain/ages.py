"""Ages of files and sessions for the cleanup (D8). Pure; the clock is passed in.

Ages count from the latest stored time of a file: created_at, the session's completed_at, scanned_at, and
expires_at of an expired session. A file is expired exactly ttl after that time, not a microsecond
earlier. An open session is expired at expires_at exactly; completed, aborted and expired sessions never
expire (again).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.domain.states import is_blocked, is_deliverable


@dataclass(frozen=True)
class CleanupFacts:
    """What the cleanup knows of one file when it re-checks it."""

    purpose: str
    upload_state: str
    scan_status: str
    created_at: datetime
    deleted: bool = False
    attached: bool = False
    scanned_at: datetime | None = None
    session_state: str | None = None
    completed_at: datetime | None = None
    expires_at: datetime | None = None
    id: uuid.UUID | None = None  # the file's, as the database reads them (the rules do not use them)
    uploaded_by: uuid.UUID | None = None


def last_change(facts: CleanupFacts) -> datetime:
    """The latest stored time of the file."""
    times = [facts.created_at, facts.completed_at, facts.scanned_at]
    if facts.session_state == "expired":
        times.append(facts.expires_at)
    return max(t for t in times if t is not None)


def session_expired(state: str, expires_at: datetime, now: datetime) -> bool:
    """An open session is expired at expires_at exactly (D8 a); other states never expire (again)."""
    return state == "open" and now >= expires_at


def unattached_expired(facts: CleanupFacts, now: datetime, ttl: timedelta) -> bool:
    """Step b: a deliverable attachment, not deleted, not attached, ttl past its last change."""
    return (
        facts.purpose == "attachment"
        and not facts.deleted
        and not facts.attached
        and is_deliverable(facts.upload_state, facts.scan_status)
        and now - last_change(facts) >= ttl
    )


def failed_row_expired(facts: CleanupFacts, now: datetime, ttl: timedelta) -> bool:
    """Step c: a failed or blocked attachment, not deleted, not attached, ttl past its last change."""
    failed_or_blocked = facts.upload_state == "failed" or is_blocked(facts.upload_state, facts.scan_status)
    return (
        facts.purpose == "attachment"
        and not facts.deleted
        and not facts.attached
        and failed_or_blocked
        and now - last_change(facts) >= ttl
    )


def unkept_expired(
    purpose: str, upload_state: str, deleted: bool, kept: bool, last_change_at: datetime, now: datetime, ttl: timedelta
) -> bool:
    """Cleanup h (D16, beyond the brief): an avatar or logo file that no slot keeps, not deleted, no longer
    uploading, last changed at least `ttl` ago, is deleted. An upload in progress belongs to its session's
    expiry (step a), whatever the two ttls are."""
    return (
        purpose in ("avatar", "branding")
        and upload_state != "uploading"
        and not deleted
        and not kept
        and last_change_at <= now - ttl
    )


def pending_scan_action(
    upload_state: str,
    scan_status: str,
    deleted: bool,
    last_change_at: datetime,
    resent_at: datetime | None,
    now: datetime,
    ttl: timedelta,
) -> str | None:
    """Cleanup j (D19): what to do with a complete file whose scan is still pending.

    Returns:
        "resend" past `ttl` when the scan was never sent again; "end" (the scan ends as error and the file is
        purged) past twice `ttl`, once the resent scan had `ttl` to come back; None otherwise.
    """
    if deleted or upload_state != "complete" or scan_status != "pending" or last_change_at > now - ttl:
        return None
    if resent_at is None:
        return "resend"
    if resent_at <= now - ttl and last_change_at <= now - 2 * ttl:
        return "end"
    return None
