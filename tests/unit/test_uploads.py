"""Upload rules (app/domain/uploads.py). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.domain.uploads import lease_in_force

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
TIMEOUT = timedelta(minutes=15)


def test_a_claim_holds_until_its_timeout_exactly():
    assert not lease_in_force(None, NOW, TIMEOUT)
    assert lease_in_force(NOW, NOW, TIMEOUT)
    assert lease_in_force(NOW - TIMEOUT + timedelta(microseconds=1), NOW, TIMEOUT)
    assert not lease_in_force(NOW - TIMEOUT, NOW, TIMEOUT)  # a crashed completion's claim may be taken over
