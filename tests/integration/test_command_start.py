"""What an operator command costs before it works: on an fs store with tracing off, `lethe cleanup` imports no
S3 client (minio), no migration tool (yoyo), no tracing SDK and no cron parser. Each of them cost every command
and role a share of its start (about a third of a command's CPU together); they are loaded where they are used:
an S3 store, `lethe migrate`, OTEL_* asking for traces, a configured schedule."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.one_store

# Runs the command in process and says which of the packages it loaded.
PROBE = """
import json, sys
from app.entry.main import main
try:
    main(["cleanup", "--dry-run", "--json"])
except SystemExit as stop:
    assert not stop.code, stop.code
loaded = sorted(name for name in ("minio", "urllib3", "yoyo", "opentelemetry.sdk", "apscheduler") if name in sys.modules)
print(json.dumps(loaded), file=sys.stderr)
"""


def run_probe(env: dict[str, str]) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines() if '"level"' not in line)[-3000:]
    json.JSONDecoder().raw_decode(done.stdout)  # the command answered (the console exporter's spans may follow)
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_a_command_on_fs_loads_no_s3_client_no_migration_tool_no_tracing_sdk(database_url, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path)}
    assert run_probe(env) == []
    # each is still there when asked for: a schedule, and traces
    policies = [{"name": "p", "purpose": "attachment", "max_age": "30d", "grace": "0s", "schedule": "0 3 * * *"}]
    traced = dict(env, LETHE_RETENTION_POLICIES=json.dumps(policies), OTEL_TRACES_EXPORTER="console")
    assert run_probe(traced) == ["apscheduler", "opentelemetry.sdk"]
