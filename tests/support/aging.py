"""Age objects in a test store: a sweep and the audit decide by the time the store reports for an object.

fs: the entry's own mtime (never a link's target). S3: moto's server runs in this process, so the test sets
the stored last-modified time of every version of the key (S3 itself offers no way to backdate).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime


def age_object(raw_store, key: str, when: datetime) -> None:
    if raw_store.driver == "fs":
        stamp = when.timestamp()
        os.utime(os.path.join(raw_store.root, key), (stamp, stamp), follow_symlinks=False)
        return
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket = s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[raw_store.bucket]
    versions = bucket.keys.getlist(key)
    assert versions, "no such key in the test bucket"
    for version in versions:
        version.last_modified = when.astimezone(UTC).replace(tzinfo=None)  # moto keeps naive UTC
