"""What the roles do with a bucket that keeps bytes (issue 9 finding 1, D16): each role that touches the
store reads versioning and object lock at start and logs them; object lock makes api, worker, scheduler,
lethe dev and `lethe config check` exit 2 naming file.s3.bucket, with no override."""

from __future__ import annotations

import json
import os
import signal
import uuid
from typing import Any

import pytest

from tests.support.roles import wait_for_http

pytestmark = pytest.mark.e2e


def s3_env(role_env, moto_server, bucket: str) -> dict[str, Any]:
    return {
        **role_env,
        "LETHE_FILE_STORAGE_DRIVER": "s3",
        "LETHE_FILE_S3_ENDPOINT": moto_server,
        "LETHE_FILE_S3_BUCKET": bucket,
        "LETHE_FILE_S3_SECURE": "false",
        "LETHE_FILE_S3_REGION": "us-east-1",
        "LETHE_FILE_S3_ACCESS_KEY": "testing",
        "LETHE_FILE_S3_SECRET_KEY": "testing",
        "LETHE_FILE_PART_SIZE": "5MiB",
    }


@pytest.fixture
def locked_bucket(moto_server):
    from tests.support.stores import make_s3_store

    store = make_s3_store(moto_server)
    name = f"lethe-locked-{uuid.uuid4().hex[:8]}"
    store.client.make_bucket(name, object_lock=True)
    return name


@pytest.mark.parametrize("args", [["api"], ["worker"], ["scheduler"], ["dev", "--port", "0"], ["config", "check"]])
def test_object_lock_refuses_to_start(role_env, start_role, moto_server, locked_bucket, args, tmp_path):
    # files stored as they are (file.encryption off): a lock could keep their bytes readable. With encryption on
    # the bucket is taken (tests/integration/test_encryption.py).
    env = dict(s3_env(role_env, moto_server, locked_bucket), LETHE_FILE_ENCRYPTION="off")
    os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    role = start_role(args if args[0] != "dev" else [*args, "--state-dir", str(tmp_path / "state")], env)
    assert role.proc.wait(60) == 2, role.output()
    output = role.output()
    assert "file.s3.bucket" in output and "object lock" in output
    assert "testing" not in output  # no credential


def test_the_api_logs_what_the_bucket_keeps(role_env, start_role, moto_server):
    from minio.commonconfig import ENABLED
    from minio.versioningconfig import VersioningConfig

    from tests.support.stores import make_s3_store

    store = make_s3_store(moto_server)
    store.client.set_bucket_versioning(store.bucket, VersioningConfig(ENABLED))
    api = start_role(["api"], s3_env(role_env, moto_server, store.bucket))
    wait_for_http(f"http://127.0.0.1:{role_env['LETHE_API_PORT']}/readyz", api)  # up, signal handlers in place
    line = next(json.loads(line) for line in api.output().splitlines() if "storage.inspected" in line)
    assert (line["versioning"], line["object_lock"], line["role"]) == ("enabled", "off", "api")
    assert api.stop(signal.SIGTERM) == 0
