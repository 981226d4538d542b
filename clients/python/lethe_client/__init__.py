"""A client for Lethe's HTTP API (docs/api.md): `Client(base_url, token)`, the models its answers are read
into, the errors a problem answer raises, and `verify_webhook` for the messages Lethe sends."""

from lethe_client.client import OPERATIONS, Client, Download, UploadInterrupted
from lethe_client.errors import LetheError
from lethe_client.models import (
    MODELS,
    BatchDeleteResult,
    Draft,
    Erasure,
    Event,
    Explanation,
    File,
    Hold,
    Link,
    Message,
    Part,
    PartUrl,
    Receipt,
    Thumbnail,
    Upload,
    UploadView,
    Usage,
)
from lethe_client.webhooks import WEBHOOK_TYPES, WebhookMessage, WebhookVerificationError, verify_webhook

__all__ = [
    "MODELS",
    "OPERATIONS",
    "WEBHOOK_TYPES",
    "BatchDeleteResult",
    "Client",
    "Download",
    "Draft",
    "Erasure",
    "Event",
    "Explanation",
    "File",
    "Hold",
    "LetheError",
    "Link",
    "Message",
    "Part",
    "PartUrl",
    "Receipt",
    "Thumbnail",
    "Upload",
    "UploadInterrupted",
    "UploadView",
    "Usage",
    "WebhookMessage",
    "WebhookVerificationError",
    "verify_webhook",
]
