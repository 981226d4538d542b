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


def test_a_store_wide_failure_holds_calls_back_for_the_cooldown_only():
    ticks = Ticks()
    breaker = Breaker(cooldown=5.0, now=ticks)
    breaker.before("put")  # closed: goes through
    breaker.failed()
    ticks.now += 4.9
    with pytest.raises(StorageError, match="held back"):
        breaker.before("delete_many")
    ticks.now += 0.2
    breaker.before("delete_many")  # the cooldown is over: the next call tries the store again


def test_a_successful_readiness_check_closes_it_at_once():
    ticks = Ticks()
    breaker = Breaker(cooldown=5.0, now=ticks)
    breaker.failed()
    breaker.close()
    breaker.before("head")
