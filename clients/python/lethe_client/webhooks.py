"""The messages Lethe sends to an application's webhook endpoint, verified with the Standard Webhooks library."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

# Every type Lethe sends (an endpoint takes those its `events` name): a file's lifecycle, then its end.
WEBHOOK_TYPES = (
    "file.ready",
    "file.blocked",
    "file.failed",
    "file.variants_ready",
    "file.purged",
    "erasure.completed",
    "hold.placed",
    "hold.released",
)


@dataclass(frozen=True)
class WebhookMessage:
    """One verified message: its `webhook-id` (drop duplicates by it: delivery is at least once), its type,
    when its event happened, and its data (ids, counts, times and reason words; never a name)."""

    id: str
    type: str
    timestamp: datetime
    data: dict[str, Any]

    @property
    def file_id(self) -> str | None:
        value = self.data.get("file_id")
        return str(value) if value is not None else None


def verify_webhook(payload: bytes | str, headers: Mapping[str, str], secret: str) -> WebhookMessage:
    """Verify a message's signature with the endpoint's secret (`whsec_...`) and read it.

    Raises:
        WebhookVerificationError: the signature does not verify, or the timestamp is more than 5 minutes off.
        ValueError: a verified message of a type this client does not know (a newer Lethe).
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    body = payload.decode() if isinstance(payload, bytes) else payload
    message = Webhook(secret).verify(body, lowered)
    kind = str(message["type"])
    if kind not in WEBHOOK_TYPES:
        raise ValueError(f"a webhook of a type this client does not know: {kind}")
    stamp = datetime.fromisoformat(str(message["timestamp"]).replace("Z", "+00:00"))
    return WebhookMessage(id=lowered["webhook-id"], type=kind, timestamp=stamp, data=dict(message["data"]))


__all__ = ["WEBHOOK_TYPES", "WebhookMessage", "WebhookVerificationError", "verify_webhook"]
