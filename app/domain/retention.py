"""Retention by purpose and unmanaged prefixes (D16, seed 003): the policies as values and the rules that
decide. Pure: no I/O, no framework, the clock passed in (their parsing from the configuration is in
app/platform/config/entries.py).

A policy retires a settled, live file of its purpose once its last change is older than `max_age` (the file
is gone to its readers, its objects stay), and deletes it through mark_deleted once it has been retired
longer than `grace`. An unmanaged prefix is a part of the store another program writes; a sweep removes what
was written there before a bound taken when the run starts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.domain.keys import FILES_PREFIX, UPLOADS_PREFIX, KeySchemaError, validate_key

PURPOSES = ("attachment", "avatar", "branding", "gdpr_export")
RESERVED_PREFIXES = (FILES_PREFIX, UPLOADS_PREFIX, ".tmp/")
DEV_FAST_INTERVAL = timedelta(minutes=5)  # seed 003 5.3: every schedule every 5 minutes under dev_fast


@dataclass(frozen=True)
class Policy:
    """One retention policy (`retention.policies`)."""

    name: str
    purpose: str
    max_age: timedelta
    grace: timedelta
    schedule: str
    min_interval: timedelta | None = None
    include_attached: bool = False

    @property
    def run_name(self) -> str:
        """Its row in schedule_runs."""
        return f"retention:{self.name}"


@dataclass(frozen=True)
class UnmanagedPrefix:
    """One prefix another program writes into the store (`storage.unmanaged_prefixes`)."""

    prefix: str
    schedule: str
    max_age: timedelta | None = None

    @property
    def run_name(self) -> str:
        """Its row in schedule_runs."""
        return f"sweep:{self.prefix}"

    def created_before(self, started_at: datetime) -> datetime:
        """The bound of a run that started at `started_at`: only objects last modified strictly before it
        go. Taken down to the whole second, because stores report modification times in whole seconds
        (S3's listing, some file systems): an object written in the same second as the start is never taken
        for an older one. With max_age, the bound moves back by it."""
        bound = started_at.replace(microsecond=0)
        return bound - self.max_age if self.max_age is not None else bound


@dataclass(frozen=True)
class RetentionFacts:
    """What a policy decides on, read under the file's row lock."""

    purpose: str
    upload_state: str
    deleted: bool
    retired_at: datetime | None
    last_change_at: datetime
    attached: bool
    id: uuid.UUID | None = None  # the file's, as the database reads it (the rules do not use it)


def retire_due(facts: RetentionFacts, policy: Policy, now: datetime) -> bool:
    """A settled, live file of the policy's purpose whose last change is older than max_age. An attached
    file only when the policy includes attached files."""
    return (
        facts.purpose == policy.purpose
        and not facts.deleted
        and facts.retired_at is None
        and facts.upload_state != "uploading"
        and facts.last_change_at <= now - policy.max_age
        and (policy.include_attached or not facts.attached)
    )


def delete_due(facts: RetentionFacts, policy: Policy, now: datetime) -> bool:
    """A file of the policy's purpose retired at least `grace` ago and not yet deleted."""
    return (
        facts.purpose == policy.purpose
        and not facts.deleted
        and facts.retired_at is not None
        and facts.retired_at <= now - policy.grace
        and (policy.include_attached or not facts.attached)
    )


def gate_open(last_run_at: datetime | None, now: datetime, min_interval: timedelta | None) -> bool:
    """The cadence gate (seed 003 4.5): a run within min_interval of the last real run is skipped."""
    return min_interval is None or last_run_at is None or now - last_run_at >= min_interval


def sweepable(key: str, modified_at: datetime, prefix: str, created_before: datetime) -> bool:
    """An object a sweep of `prefix` may delete: under the prefix, a well-formed key, and written before
    the run's bound."""
    if not key.startswith(prefix) or modified_at >= created_before:
        return False
    try:
        validate_key(key)
    except KeySchemaError:
        return False
    return True
