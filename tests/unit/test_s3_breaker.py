"""The S3 driver's breaker (D13): after a store-wide failure calls fail at once for a cooldown."""

from __future__ import annotations

import pytest

from app.errors import StorageError
from app.storage.s3 import Breaker


class Ticks:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failures_in_a_row_hold_calls_back_for_the_cooldown_only():
    ticks = Ticks()
    breaker = Breaker(cooldown=5.0, threshold=3, now=ticks)
    breaker.before("put")  # closed: goes through
    breaker.failed()
    breaker.failed()
    breaker.before("put")  # two failures are not an outage yet
    breaker.failed()
    ticks.now += 4.9
    with pytest.raises(StorageError, match="held back"):
        breaker.before("delete_many")
    ticks.now += 0.2
    breaker.before("delete_many")  # the cooldown is over: the next call tries the store again


def test_a_success_between_failures_keeps_it_closed():
    breaker = Breaker(cooldown=5.0, threshold=3, now=Ticks())
    for _ in range(5):
        breaker.failed()
        breaker.failed()
        breaker.succeeded()
    breaker.before("get")


def test_a_successful_readiness_check_closes_it_at_once():
    ticks = Ticks()
    breaker = Breaker(cooldown=5.0, threshold=1, now=ticks)
    breaker.failed()
    breaker.close()
    breaker.before("head")
