"""Operator commands trace too when the OTEL_* variables ask: `lethe restore reconcile` is a `restore.reconcile`
span with its counts, `lethe cleanup` a `cleanup.step` span per step with its counts, exported before the command
exits (to the suite's own OTLP receiver) and name-free."""

from __future__ import annotations

import json
import sys

import pytest

from tests.support import zygote
from tests.support.lethe import ALEX
from tests.support.otlp import Receiver

pytestmark = pytest.mark.one_store
CANARY = "Canary-Trace-command-will"


def test_reconcile_and_cleanup_are_spans_with_their_counts(lethe, database_url, tmp_path):
    file_id = lethe.upload(ALEX, b"will", name=f"{CANARY}.txt")
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    receiver = Receiver()
    try:
        env = {
            "PATH": "/usr/bin:/bin",
            "LETHE_DATABASE_URL": database_url,
            "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        }
        for args in (["restore", "reconcile", "--dry-run", "--json"], ["cleanup", "--dry-run", "--json"]):
            done = zygote.run(
                [sys.executable, "-m", "app.entry", *args], env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
            json.loads(done.stdout)  # the command's answer is untouched by tracing
        reconciled = [s for s in receiver.spans if s.span.name == "restore.reconcile"]
        assert len(reconciled) == 1 and reconciled[0].service == "lethe-restore"
        assert reconciled[0].attribute("lethe.dry_run") is True and reconciled[0].attribute("lethe.entries") == 0
        steps = [s for s in receiver.spans if s.span.name == "cleanup.step"]
        assert len(steps) >= 18 and {s.service for s in steps} == {"lethe-cleanup"}
        backlog = next(s for s in steps if s.attribute("lethe.step") == "f")
        assert backlog.attribute("lethe.candidates") == 1 and backlog.attribute("lethe.dry_run") is True
        assert not [s for s in receiver.spans if CANARY in s.text]
    finally:
        receiver.close()
