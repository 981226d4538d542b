"""On a real S3 server (issue 23): `lethe sweep run` and `lethe audit --delete`, run as an operator would, on a
versioned SeaweedFS bucket, leave no version and no delete marker behind."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from app.domain.keys import original_key
from tests.support import zygote
from tests.support.stores import all_versions, make_s3_store

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def lethe(env, *args):
    result = zygote.run(
        [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_sweep_and_audit_on_a_versioned_seaweedfs_bucket_leave_nothing(seaweed_server, database_url):
    store = make_s3_store(seaweed_server, versioned=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_STORAGE_DRIVER": "s3",
        "LETHE_FILE_S3_ENDPOINT": seaweed_server,
        "LETHE_FILE_S3_BUCKET": store.bucket,
        "LETHE_FILE_S3_ACCESS_KEY": "testing",
        "LETHE_FILE_S3_SECRET_KEY": "testing",
        "LETHE_FILE_S3_SECURE": "false",
        "LETHE_STORAGE_UNMANAGED_PREFIXES": json.dumps([{"prefix": "issues/", "schedule": "0 0 * * *"}]),
    }
    # Given objects another program wrote under a declared prefix, and an orphan under f/ that no row explains
    swept = [f"issues/{n}/attachment.bin" for n in range(3)]
    for key in swept:
        store.put(key, b"written by the issue tracker", 28)
    orphan = original_key(uuid.uuid4())
    store.put(orphan, b"an object no row explains", 25)
    kept = "elsewhere/keep-me"
    store.put(kept, b"not declared: never touched", 27)
    # S3 reports whole seconds: the run's bound is taken down to the second, so let that second pass
    written = time.time()
    while int(time.time()) <= int(written):
        time.sleep(0.05)
    # When an operator sweeps the prefix and deletes the audit's orphans
    sweep = lethe(env, "sweep", "run", "--json")["prefixes"][0]
    assert (sweep["listed"], sweep["deleted"], sweep["failed"]) == (3, 3, 0)
    before = lethe(env, "audit", "--json")
    assert before["orphans"]["count"] == 1
    lethe(env, "audit", "--delete", "--grace", "0s", "--json")
    assert lethe(env, "audit", "--json")["orphans"]["count"] == 0
    # Then no version and no delete marker of those keys is left; the undeclared object is untouched
    left = {item.object_name for item in all_versions(store)}
    assert left == {kept}
