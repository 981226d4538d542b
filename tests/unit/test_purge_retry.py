"""When a refused file is purged again (app/domain/purge_retry.py). Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.purge_retry import next_attempt_at, overdue, retry_wait

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)


def test_the_wait_doubles_from_the_base_and_stops_at_the_cap():
    assert [retry_wait(n, MINUTE, HOUR) for n in range(1, 9)] == [
        MINUTE,
        2 * MINUTE,
        4 * MINUTE,
        8 * MINUTE,
        16 * MINUTE,
        32 * MINUTE,
        HOUR,
        HOUR,
    ]
    assert next_attempt_at(3, NOW, MINUTE, HOUR) == NOW + 4 * MINUTE


@given(st.integers(min_value=1, max_value=10_000))
def test_the_wait_is_never_below_the_base_nor_above_the_cap(attempts):
    assert MINUTE <= retry_wait(attempts, MINUTE, HOUR) <= HOUR


def test_attempts_count_from_one():
    with pytest.raises(ValueError):
        retry_wait(0, MINUTE, HOUR)


def test_overdue_strictly_past_the_delay():
    assert not overdue(NOW - HOUR, NOW, HOUR)
    assert overdue(NOW - HOUR - timedelta(microseconds=1), NOW, HOUR)
