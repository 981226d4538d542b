"""Deletion webhooks: Standard Webhooks 1.0 (standardwebhooks.com) as pure rules. The endpoints of
`webhooks.endpoints`, the events, the body and its signature, and what an answer means for a delivery.

A message is `{"type", "timestamp", "data"}`; it is signed as `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
with each of the endpoint's secrets (`whsec_<base64>`), space-separated while a secret is rotated. The id is
stable across every attempt of one message, so receivers can drop duplicates (delivery is at least once)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

FILE_READY = "file.ready"
FILE_BLOCKED = "file.blocked"
FILE_FAILED = "file.failed"
FILE_VARIANTS_READY = "file.variants_ready"
FILE_PURGED = "file.purged"
ERASURE_COMPLETED = "erasure.completed"
HOLD_PLACED = "hold.placed"
HOLD_RELEASED = "hold.released"
# The lifecycle of a file as the application hears it, then the ends.
SETTLED = (FILE_READY, FILE_BLOCKED, FILE_FAILED, FILE_VARIANTS_READY)
EVENTS = (*SETTLED, FILE_PURGED, ERASURE_COMPLETED, HOLD_PLACED, HOLD_RELEASED)

# Why a file failed, as `file.failed` says (never more than this word).
FAILED_REASONS = (
    "aborted",  # its uploader aborted the upload (or terminated the tus upload)
    "expired",  # the upload session expired before it completed
    "size_mismatch",  # the completion found other bytes than declared
    "checksum_mismatch",
    "content_corrupt",  # its stored bytes did not open as what was sealed
    "scan_error",  # the scan could not vouch for it (clamd's error, too large to scan, unreadable)
)


def scan_settled(outcome: str) -> tuple[str, str | None] | None:
    """The event a scan outcome written for a file sends, and its reason: deliverable (clean, or no scanner)
    is `file.ready`, infected `file.blocked`, an error or a digest the scan found wrong `file.failed`."""
    if outcome in ("clean", "skipped"):
        return FILE_READY, None
    if outcome == "infected":
        return FILE_BLOCKED, "infected"
    if outcome == "error":
        return FILE_FAILED, "scan_error"
    if outcome == "failed":
        return FILE_FAILED, "checksum_mismatch"  # a direct upload's declared digest (its size: the caller says)
    return None


SECRET_PREFIX = "whsec_"
SECRET_BYTES = (24, 64)  # the specification: "between 24 bytes and 64 bytes"


@dataclass(frozen=True)
class Endpoint:
    """One receiver of `webhooks.endpoints`: its name (in metrics and the delivery table), URL, secrets (the
    first signs alone; all sign while a secret is rotated) and the events it takes."""

    name: str
    url: str
    secrets: tuple[bytes, ...]
    events: tuple[str, ...]

    def __repr__(self) -> str:  # never a secret in a traceback or a log line
        return f"Endpoint(name={self.name!r}, events={self.events!r})"

    @property
    def fingerprint(self) -> str:
        """What identifies this endpoint's configuration: a 410 disables it until this changes."""
        canonical = json.dumps([self.url, [base64.b64encode(s).decode() for s in self.secrets], list(self.events)])
        return hashlib.sha256(canonical.encode()).hexdigest()


def decode_secret(text: Any) -> bytes:
    """The key of a `whsec_<base64>` secret.

    Raises:
        ValueError: not that form, or not 24 to 64 bytes (the message never repeats the value).
    """
    if not isinstance(text, str) or not text.startswith(SECRET_PREFIX):
        raise ValueError(f"Must be {SECRET_PREFIX}<base64> (Standard Webhooks).")
    try:
        key = base64.b64decode(text[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Must be {SECRET_PREFIX}<base64> (Standard Webhooks).") from None
    if not SECRET_BYTES[0] <= len(key) <= SECRET_BYTES[1]:
        raise ValueError(f"Must decode to {SECRET_BYTES[0]} to {SECRET_BYTES[1]} bytes.")
    return key


def message_id(delivery_id: Any) -> str:
    """The `webhook-id` of a delivery (stable across its attempts)."""
    return f"msg_{str(delivery_id).replace('-', '')}"


def body_of(event_type: str, occurred_at: datetime, data: Mapping[str, Any]) -> bytes:
    """The body: the same bytes for every attempt of a message (sorted keys, no spaces)."""
    return json.dumps(
        {"type": event_type, "timestamp": occurred_at.isoformat().replace("+00:00", "Z"), "data": data},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def signature(secrets: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header: `v1,<base64>` for each secret, space-separated."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode() for secret in secrets
    )


def headers_of(secrets: Sequence[bytes], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """Every header of an attempt."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secrets, msg_id, timestamp, body),
        "content-type": "application/json",
        "user-agent": "Lethe-Webhooks/1",
    }


def outcome_of(status: int | None) -> str:
    """What an attempt's answer means: `delivered` (2xx), `disable` (410: the endpoint is gone until its
    configuration changes), `retry` (no answer: a timeout or a connection error, or a 5xx), `final` (any
    other answer: the receiver refused this message; it is not sent again)."""
    if status is None or status >= 500:
        return "retry"
    if 200 <= status < 300:
        return "delivered"
    if status == 410:
        return "disable"
    return "final"


def next_attempt_at(attempts: int, schedule: Sequence[timedelta], now: datetime) -> datetime | None:
    """When to try again after `attempts` failed attempts: the schedule's `attempts`-th delay after now, or
    None when the schedule is spent (the delivery failed)."""
    if attempts < 1 or attempts > len(schedule):
        return None
    return now + schedule[attempts - 1]
