"""Rate limits on what costs (D21): creating uploads, completing them, minting links, batch deletes, erasures.
Pure: the policies, their windows, and the IETF RateLimit header fields.

A policy allows `quota` requests per `window`, counted per principal (or, for a request without valid
credentials, per client address) in fixed windows shared by every api process. Upload parts, tus PATCH chunks
and reads of a file the client may read are never counted.

The answers carry the fields of the IETF draft "RateLimit header fields for HTTP" (httpapi working group,
draft 08 onward), as structured-field lists: `RateLimit-Policy: "uploads";q=600;w=60` (the policy) and
`RateLimit: "uploads";r=598;t=42` (what remains in this window, and seconds until it ends).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.domain.durations import parse_duration

# The operations that cost, by the name of their policy (a configuration key of rate_limits.*).
POLICIES = ("uploads", "completions", "links", "batch_deletes", "erasures")
_RATE = re.compile(r"\s*(\d{1,9})\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Rate:
    """`quota` requests per `window`."""

    quota: int
    window: timedelta

    @property
    def window_s(self) -> int:
        """The window in whole seconds."""
        return int(self.window.total_seconds())


def parse_rate(text: str) -> Rate | None:
    """`600/1m` as a Rate; empty: None (no limit).

    Raises:
        ValueError: another form, a quota below 1 or a window under a second or over a day.
    """
    if not text.strip():
        return None
    matched = _RATE.fullmatch(text)
    if matched is None:
        raise ValueError("not N/duration")
    window = timedelta(seconds=parse_duration(matched[2]))
    quota = int(matched[1])
    if quota < 1 or not timedelta(seconds=1) <= window <= timedelta(days=1) or window.microseconds:
        raise ValueError("out of range")
    return Rate(quota, window)


def window_of(now: datetime, rate: Rate) -> tuple[datetime, int]:
    """The start of the fixed window `now` falls in, and whole seconds until it ends (at least 1)."""
    epoch = now.timestamp()
    start = epoch - epoch % rate.window_s
    ends_in = max(1, int(start + rate.window_s - epoch + 0.999))
    return datetime.fromtimestamp(start, tz=now.tzinfo), ends_in


@dataclass(frozen=True)
class Count:
    """One request counted against a policy: whether it may go on, and what the answer says."""

    policy: str
    rate: Rate
    hits: int  # requests counted in this window, this one included
    ends_in_s: int

    @property
    def allowed(self) -> bool:
        """Whether the request is within the quota."""
        return self.hits <= self.rate.quota

    @property
    def remaining(self) -> int:
        """Requests left in this window."""
        return max(0, self.rate.quota - self.hits)

    def headers(self) -> dict[str, str]:
        """The RateLimit-Policy and RateLimit fields (and Retry-After when refused)."""
        fields = {
            "RateLimit-Policy": f'"{self.policy}";q={self.rate.quota};w={self.rate.window_s}',
            "RateLimit": f'"{self.policy}";r={self.remaining};t={self.ends_in_s}',
        }
        if not self.allowed:
            fields["Retry-After"] = str(self.ends_in_s)
        return fields
