"""Bearer tokens at the edge (D11).

HS256 with `auth.jwt_secret`, or RS256/ES256 with `auth.jwt_public_key`; `iss` and `aud` are required
when configured. `sub` is the principal (a UUID), `scope` a space-separated list of `files:read`,
`files:write`, `manage`. Every failure is a 401 saying why in a word (`token_missing`, `token_expired`,
`token_invalid`), never echoing the token; the category of the error is logged, never the token.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

import jwt

from app.domain.access import SCOPES, Principal
from app.errors import Unauthorized
from app.platform.observability.logs import log_event

if TYPE_CHECKING:
    from app.platform.config import Config

log = logging.getLogger("lethe.auth")


class Authenticator:
    """Verifies `Authorization: Bearer <jwt>` headers against the configured key."""

    def __init__(
        self, secret: str = "", public_key: str = "", issuer: str = "", audience: str = "", leeway_s: float = 30.0
    ):
        if public_key:
            self.key, self.algorithms = public_key, ["RS256", "ES256"]
        else:
            self.key, self.algorithms = secret, ["HS256"]
        self.issuer = issuer or None
        self.audience = audience or None
        self.leeway_s = leeway_s

    @classmethod
    def from_config(cls, cfg: Config) -> Authenticator:
        """The authenticator of the configured key (auth.*)."""
        return cls(
            cfg.auth.jwt_secret,
            cfg.auth.jwt_public_key,
            cfg.auth.issuer,
            cfg.auth.audience,
            cfg.auth.leeway.total_seconds(),
        )

    def principal(self, authorization: str | None) -> Principal:
        """The principal of an Authorization header.

        Raises:
            Unauthorized: missing, malformed, expired, wrongly signed, or without a UUID `sub`.
        """
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("token_missing", "Send Authorization: Bearer <token>.")
        if not self.key:
            raise Unauthorized("token_invalid", "This installation has no key to verify tokens with.")
        options: Any = {"require": ["sub", "exp"]}
        try:
            claims = jwt.decode(
                token.strip(),
                self.key,
                algorithms=self.algorithms,
                issuer=self.issuer,
                audience=self.audience,
                options=options,
                leeway=self.leeway_s,
            )
            principal_id = uuid.UUID(str(claims["sub"]))
        except jwt.ExpiredSignatureError:
            log_event(log, "info", "auth.refused", "token refused", error="ExpiredSignatureError")
            raise Unauthorized("token_expired", "The token has expired: get a new one.") from None
        except (jwt.InvalidTokenError, ValueError, TypeError) as exc:
            log_event(log, "info", "auth.refused", "token refused", error=type(exc).__name__)
            raise Unauthorized("token_invalid", _why_invalid(exc)) from None
        scope = claims.get("scope", "")
        scopes = frozenset(scope.split()) if isinstance(scope, str) else frozenset()
        return Principal(principal_id, scopes & set(SCOPES))


def _why_invalid(exc: Exception) -> str:
    """What is wrong with a token, by the claim it concerns (never its value)."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"The token has no `{exc.claim}` claim; Lethe needs `sub` (the principal's UUID) and `exp`."
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "The token is not valid yet (its `nbf` or `iat` lies in the future): check the issuer's clock."
    if isinstance(exc, jwt.InvalidAudienceError):
        return "The token's `aud` is not this installation's (auth.audience)."
    if isinstance(exc, jwt.InvalidIssuerError):
        return "The token's `iss` is not this installation's (auth.issuer)."
    if isinstance(exc, jwt.InvalidSignatureError):
        return "The token's signature does not verify with this installation's key."
    if isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, jwt.InvalidTokenError):
        return "The token's `sub` is not a UUID (Lethe names principals by UUID)."
    return "The token is malformed, wrongly signed, or not for this installation."
