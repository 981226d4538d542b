"""Minting tokens (`lethe token`, `lethe dev`, tests): HS256 tokens of the shape the api verifies (D11)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import jwt


def mint_token(
    secret: str,
    sub: uuid.UUID | str,
    scopes: tuple[str, ...] = ("files:read", "files:write"),
    ttl: timedelta = timedelta(hours=12),
    now: datetime | None = None,
    issuer: str = "",
    audience: str = "",
) -> str:
    """An HS256 token for `sub` with the given scopes (development and tests)."""
    now = now or datetime.now().astimezone()
    claims = {
        "sub": str(sub),
        "scope": " ".join(scopes),
        "iat": int(now.timestamp()),
        "exp": int((now + ttl).timestamp()),
    }
    if issuer:
        claims["iss"] = issuer
    if audience:
        claims["aud"] = audience
    return jwt.encode(claims, secret, algorithm="HS256")
