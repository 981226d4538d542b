"""When a file whose objects the store refused is purged again (D7). Pure; the clock is passed in.

A refused file is isolated from the others of its batch and retried with a doubling wait, capped, so that
it never blocks the catch-up of other files (D8 d) and never hammers a store that keeps refusing it. Once
it has been failing longer than privacy.object_delete_delay, the operator is warned once with its id.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def retry_wait(attempts: int, base: timedelta, cap: timedelta) -> timedelta:
    """The wait after the attempts-th failed attempt: base, 2*base, 4*base, ..., at most cap."""
    if attempts < 1:
        raise ValueError("attempts counts failed attempts, from 1")
    if attempts > 62 or base.total_seconds() * 2 ** (attempts - 1) >= cap.total_seconds():
        return cap  # compared in seconds first: base * 2**60 overflows a timedelta
    wait: timedelta = base * (2 ** (attempts - 1))
    return wait


def next_attempt_at(attempts: int, now: datetime, base: timedelta, cap: timedelta) -> datetime:
    """When a file the store refused is tried again: the base doubled per attempt, capped."""
    return now + retry_wait(attempts, base, cap)


def overdue(failing_since: datetime, now: datetime, delay: timedelta) -> bool:
    """Whether a file has been failing past the delay within which its objects should be gone."""
    return now - failing_since > delay
