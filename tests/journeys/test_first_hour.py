"""A newcomer's first hour, as README and docs/api.md walk it: `make run` in a fresh folder, docs/api.md's blocks in a
second terminal, the operator commands beside it, Ctrl-C, `make run` again: what was uploaded is there, the
commands say what runs and what does not, and nothing in any output names a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.entry.token import mint_token
from tests.e2e.test_api_doc import READER_PAUSE, S3_ONLY, shell_blocks
from tests.e2e.test_deletion_e2e import call, upload
from tests.support import zygote
from tests.support.ports import free_port
from tests.support.roles import Role, wait_for_http

pytestmark = [pytest.mark.e2e, pytest.mark.journey]
ROOT = Path(__file__).resolve().parents[2]


def lethe(args: list[str], cwd: Path) -> subprocess.CompletedProcess[Any]:
    """An operator command run beside `make run`, in its folder, with nothing configured (as README says)."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "HOME": str(cwd)}
    return zygote.run(
        [sys.executable, "-m", "app.entry", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_make_run_the_api_doc_the_commands_beside_it_ctrl_c_and_make_run_again(database_url, tmp_path):
    here = tmp_path / "checkout"
    here.mkdir()
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path),
        "LETHE_DATABASE_URL": database_url,
    }
    outputs: list[str] = []
    first = Role(["dev", "--port", str(port)], env, tmp_path / "dev-1.log", cwd=here)
    second = None
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", first)
        # The api doc, block after block, in a second terminal in the checkout
        blocks = [
            block for block in shell_blocks((ROOT / "docs" / "api.md").read_text()) if not block.startswith(S3_ONLY)
        ]
        (tmp_path / "reader_pause.py").write_text(READER_PAUSE)
        script = "set -euo pipefail\n" + "\n".join(
            block + f"\npython3 {tmp_path / 'reader_pause.py'}\n" for block in blocks
        )
        script = script.replace("http://127.0.0.1:8080", f"http://127.0.0.1:{port}")
        walked = subprocess.run(["bash", "-c", script], cwd=here, env=env, capture_output=True, text=True, timeout=240)
        assert walked.returncode == 0, walked.stdout[-3000:] + walked.stderr[-3000:]
        outputs.append(walked.stderr)
        # (the doc ends by erasing the person it acted as) a file of another newcomer's, to find after a restart
        me = uuid.uuid4()
        token = mint_token((here / ".lethe" / "jwt_secret").read_text().strip(), me, ("files:read", "files:write"))
        kept = upload(f"http://127.0.0.1:{port}/api/v1", token, "notes.txt", b"my first file", worker=first)
        # The operator commands beside it find it, with nothing configured
        for command, said in (
            (["config", "check"], "OK"),
            (["cleanup", "--dry-run"], "dry run"),
            (["restore", "status"], "behind: False"),
            (["keys", "status"], ""),
            (["audit"], ""),
        ):
            done = lethe(command, here)
            assert done.returncode == 0 and said in done.stdout, (command, done.stdout, done.stderr)
            outputs.append(done.stdout + done.stderr)
        # Ctrl-C: it stops, and the commands say that nothing runs here now
        assert first.stop(signal.SIGINT) == 0
        outputs.append(first.output())
        stopped = lethe(["config", "check"], here)
        assert stopped.returncode == 2 and "no `make run`" in stopped.stdout
        assert lethe(["cleanup", "--dry-run"], here).returncode == 2
        # make run again: the same installation, what was uploaded is there
        second = Role(["dev", "--port", str(port)], env, tmp_path / "dev-2.log", cwd=here)
        wait_for_http(f"http://127.0.0.1:{port}/readyz", second)
        status, listed = call("GET", f"http://127.0.0.1:{port}/api/v1/files", token)
        assert status == 200 and [f["id"] for f in listed["files"]] == [kept], listed
        status, body = call("GET", f"http://127.0.0.1:{port}/api/v1/files/{kept}/content", token)
        assert status == 200 and body == b"my first file"
        assert lethe(["config", "check"], here).returncode == 0
    finally:
        if second is not None:
            second.stop(signal.SIGTERM)
            outputs.append(second.output())
        first.kill()
    # The names the doc uploads never reach a log line or a command's output
    for text in outputs:
        for name in ("hello.txt", "dot.png", "big.bin", "batch.txt", "notes.txt"):
            assert f'"{name}"' not in text and f" {name} " not in text, name
