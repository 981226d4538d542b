"""The values the content and lifecycle services work by, built once per process from the configuration
(app/entry/wiring.py), as UploadLimits is for the upload paths: a service reads them here, never the
configuration in the middle of its work, and a test can state them without a configuration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from app.domain.image_metadata import Mode
from app.domain.variants import Sizes


@dataclass(frozen=True)
class ContentPolicy:
    """The scan, the image work and the serving of files."""

    clamd_address: str  # empty: no scanner (the scan records skipped)
    scan_timeout: timedelta
    variants: bool  # image.variants: deliverable images get their variants
    sizes: Sizes  # the box of each variant
    image_max_size: int  # the largest file read whole for its variants or its metadata
    image_max_pixels: int
    image_timeout: timedelta  # making one file's variants
    strip_metadata: Mode
    strip_original: bool  # an unstripped image original is shown inline
    link_secret: str  # empty: links are not configured
    link_ttl: timedelta  # the longest a link lives


@dataclass(frozen=True)
class LifecyclePolicy:
    """Removals, holds, erasures, sweeps and the console."""

    batch_size: int  # file.gc_batch_size: the files a removal takes at a time
    object_delete_delay: timedelta  # how long a removed file's objects may stay (privacy.object_delete_delay)
    receipt_ttl: timedelta
    purge_retry_base: timedelta
    case_ref_pattern: str  # a hold's case reference
    sweep_concurrency: int
    console_session_ttl: timedelta
    dev_fast: bool  # lethe dev: a retention run's interval does not gate it
    webhook_timeout: timedelta  # one attempt of a webhook delivery
    webhook_retries: tuple[timedelta, ...]  # webhooks.retry_schedule: the wait before each further attempt
