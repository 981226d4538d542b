"""The contract, as a client generated from it meets it: schemathesis's own command line against a running `lethe
dev` (every phase, stateful links included, `--checks all` reported), and not one schema-valid request refused
(positive_data_acceptance) nor one server error (not_a_server_error). What schemathesis reports and Lethe keeps on
purpose (tus's 412 for its version header, 413 for a file too large) is in docs/decisions.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from app.entry.token import mint_token
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SECRET = "contract-cli-secret-of-sufficient-length-012"


def test_schemathesis_finds_no_schema_valid_request_refused_and_no_server_error(database_url, tmp_path):
    cli = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_LINK_SECRET": "contract-link-secret-of-sufficient-length-0",
    }
    dev = Role(["dev", "--port", str(port)], env, tmp_path / "dev.log", cwd=tmp_path)
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", dev)
        token = mint_token(SECRET, uuid.uuid4(), ("files:read", "files:write", "manage"))
        done = subprocess.run(
            [
                cli,
                "run",
                f"http://127.0.0.1:{port}/openapi.json",
                "--checks",
                "not_a_server_error,positive_data_acceptance",
                "-H",
                f"Authorization: Bearer {token}",
                "--max-examples",
                "15",
                "--seed",
                "7",
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        report = done.stdout + done.stderr
        assert "ST202" not in report and "ST101" not in report, report[-6000:]
        assert done.returncode == 0 or "Serialization not possible" in report, report[-6000:]
        assert "Tested: 4" in report  # every operation was tried (40 and more)
    finally:
        dev.stop()
