"""Ages (D8): the edges, exactly."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.domain.ages import CleanupFacts, failed_row_expired, last_change, session_expired, unattached_expired

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TTL = timedelta(hours=24)
US = timedelta(microseconds=1)
DELIVERABLE = CleanupFacts(purpose="attachment", upload_state="complete", scan_status="clean", created_at=T0)


def test_last_change_is_the_latest_stored_time():
    facts = replace(DELIVERABLE, completed_at=T0 + timedelta(hours=20), scanned_at=T0 + timedelta(hours=21))
    assert last_change(facts) == T0 + timedelta(hours=21)
    expired = CleanupFacts(
        purpose="attachment",
        upload_state="failed",
        scan_status="pending",
        created_at=T0,
        session_state="expired",
        expires_at=T0 + timedelta(hours=24),
    )
    assert last_change(expired) == T0 + timedelta(hours=24)
    # expires_at of a session that is not expired does not count
    assert last_change(replace(expired, session_state="aborted")) == T0


def test_exactly_ttl_is_expired_one_microsecond_earlier_is_not():
    assert unattached_expired(DELIVERABLE, T0 + TTL, TTL)
    assert not unattached_expired(DELIVERABLE, T0 + TTL - US, TTL)


def test_a_long_upload_keeps_its_full_window_from_completion():
    facts = replace(
        DELIVERABLE,
        completed_at=T0 + timedelta(hours=23, minutes=59),
        scanned_at=T0 + timedelta(hours=23, minutes=59, seconds=1),
    )
    assert not unattached_expired(facts, T0 + TTL + timedelta(hours=23), TTL)
    assert unattached_expired(facts, T0 + timedelta(hours=23, minutes=59, seconds=1) + TTL, TTL)


@pytest.mark.parametrize(
    "change",
    [
        {"purpose": "avatar"},
        {"purpose": "branding"},
        {"purpose": "gdpr_export"},
        {"deleted": True},
        {"attached": True},
        {"scan_status": "pending"},
        {"scan_status": "infected"},
        {"upload_state": "failed"},
    ],
)
def test_unattached_expired_needs_a_live_deliverable_unattached_attachment(change):
    assert not unattached_expired(replace(DELIVERABLE, **change), T0 + 10 * TTL, TTL)


@pytest.mark.parametrize("state, scan", [("failed", "pending"), ("complete", "infected"), ("complete", "error")])
def test_failed_and_blocked_rows_expire(state, scan):
    facts = replace(DELIVERABLE, upload_state=state, scan_status=scan)
    assert failed_row_expired(facts, T0 + TTL, TTL)
    assert not failed_row_expired(facts, T0 + TTL - US, TTL)
    assert not failed_row_expired(replace(facts, attached=True), T0 + TTL, TTL)
    assert not failed_row_expired(replace(facts, purpose="gdpr_export"), T0 + TTL, TTL)


def test_deliverable_and_pending_rows_are_not_failed_rows():
    assert not failed_row_expired(DELIVERABLE, T0 + 10 * TTL, TTL)
    assert not failed_row_expired(replace(DELIVERABLE, scan_status="pending"), T0 + 10 * TTL, TTL)


def test_an_open_session_expires_at_expires_at_exactly():
    assert session_expired("open", T0, T0)
    assert not session_expired("open", T0, T0 - US)
    for state in ("completed", "aborted", "expired"):
        assert not session_expired(state, T0, T0 + TTL)


def test_a_pending_scan_is_sent_again_once_past_the_ttl_and_ended_past_twice_the_ttl():
    from app.domain.ages import pending_scan_action

    ttl = timedelta(hours=2)
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)

    def action(age, resent_ago=None, **facts):
        args = {"upload_state": "complete", "scan_status": "pending", "deleted": False, **facts}
        resent_at = None if resent_ago is None else now - resent_ago
        return pending_scan_action(
            args["upload_state"], args["scan_status"], args["deleted"], now - age, resent_at, now, ttl
        )

    assert action(ttl - timedelta(microseconds=1)) is None
    assert action(ttl) == "resend"  # exactly ttl after, not earlier
    assert action(3 * ttl) == "resend"  # found late: resent first anyway
    assert action(2 * ttl, resent_ago=ttl - timedelta(seconds=1)) is None  # the resent scan gets a full ttl
    assert action(2 * ttl, resent_ago=ttl) == "end"
    assert action(2 * ttl - timedelta(seconds=1), resent_ago=ttl) is None
    for facts in ({"scan_status": "clean"}, {"upload_state": "failed"}, {"deleted": True}):
        assert action(3 * ttl, resent_ago=2 * ttl, **facts) is None


def test_an_avatar_still_uploading_is_never_unkept_expired():
    from app.domain.ages import unkept_expired

    ttl = timedelta(hours=24)
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    old = now - 2 * ttl
    assert unkept_expired("avatar", "complete", False, False, old, now, ttl)
    assert unkept_expired("branding", "failed", False, False, old, now, ttl)
    assert not unkept_expired("avatar", "uploading", False, False, old, now, ttl)
    assert not unkept_expired("avatar", "complete", False, True, old, now, ttl)
    assert not unkept_expired("attachment", "complete", False, False, old, now, ttl)
