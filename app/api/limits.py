"""Rate limits at the HTTP edge (the policies: app/domain/rates.py): an operation that costs is marked with
`rate_limited`; before its handler runs, the request is counted in the database against its principal (or, a
request without valid credentials, its client address), shared by every api process; the count's key is a
keyed hash of either, never the id or the address. Above the
quota it is answered 429 `rate_limited` with Retry-After; every answer of a limited operation carries the
RateLimit-Policy and RateLimit fields.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from flask import Flask, Request, Response

from app.api import problems
from app.api.schemas import ProblemSchema
from app.db import rates as rates_sql
from app.domain.access import Principal
from app.domain.rates import POLICIES, Count, Rate, window_of
from app.platform.observability import metrics

if TYPE_CHECKING:
    from app.runtime import Runtime

F = TypeVar("F", bound=Callable[..., Any])
_POLICY = "_lethe_rate_policy"


def rate_limited(blp: Any, policy: str) -> Callable[[F], F]:
    """Count this operation against `policy` (one of POLICIES), and document its 429 answer."""
    assert policy in POLICIES, policy

    def decorate(func: F) -> F:
        setattr(func, _POLICY, policy)  # copied onto flask-smorest's wrappers (functools.wraps)
        documented: F = blp.alt_response(
            429,
            schema=ProblemSchema,
            content_type=problems.MEDIA_TYPE,
            description="Too many requests of this kind (reason rate_limited): ask again after Retry-After seconds. "
            "Every answer of this operation carries RateLimit-Policy and RateLimit.",
        )(func)
        return documented

    return decorate


class Limiter:
    """Counts the requests of limited operations; one per app."""

    def __init__(self, rt: Runtime, rates: dict[str, Rate | None], secret: bytes):
        self.rt = rt
        self.rates = rates
        self.secret = secret
        self._policies: dict[tuple[str, str], str | None] = {}

    def policy_of(self, app: Flask, request: Request) -> str | None:
        """The policy an endpoint's method is counted against, if any (and if its rate is set)."""
        if request.endpoint is None:
            return None
        known = self._policies.get((request.endpoint, request.method))
        if (request.endpoint, request.method) not in self._policies:
            view = app.view_functions.get(request.endpoint)
            handler = getattr(getattr(view, "view_class", None), request.method.lower(), None)
            known = getattr(handler, _POLICY, None)
            self._policies[(request.endpoint, request.method)] = known
        return known if known is not None and self.rates.get(known) is not None else None

    def count(self, policy: str, principal: Principal | None, address: str | None) -> Count:
        """Count one request (of `principal`, else of `address`) against `policy`."""
        rate = self.rates[policy]
        assert rate is not None
        # Neither a principal nor an address is stored: a keyed hash of either, for one window (an erasure has
        # no id to find here)
        who = f"p:{principal.id}" if principal is not None else f"a:{address or ''}"
        key = f"{policy}:{hmac.new(self.secret, who.encode(), hashlib.sha256).hexdigest()[:32]}"
        start, ends_in = window_of(self.rt.clock.now(), rate)
        hits = self.rt.db.read(lambda conn: rates_sql.hit(conn, key, start))
        counted = Count(policy, rate, hits, ends_in)
        if not counted.allowed:
            metrics.RATE_LIMITED.labels(policy).inc()
        return counted


def refused(counted: Count) -> Response:
    """The 429 answer of a request over its policy's quota."""
    return problems.problem(
        429,
        reason="rate_limited",
        detail=f"At most {counted.rate.quota} requests of this kind per {counted.rate.window_s} s; ask again in "
        f"{counted.ends_in_s} s.",
        headers=counted.headers(),
    )
