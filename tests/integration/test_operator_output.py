"""Operator commands (issue 14, point 7): a readable table on stdout, logs on stderr, --json for scripts, and
a progress bar on stderr only when it is a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from app.lifecycle.steps import STEPS

pytestmark = pytest.mark.one_store
BAR = re.compile(rf"cleanup:\s+\d+%\|.*\| \d+/{len(STEPS)}")  # every step of app/lifecycle/steps


def run_with_terminal_stderr(args, env):
    """Run a command whose stderr is a terminal (a pty) and whose stdout is a pipe; returns (rc, out, tty)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.entry", *args], stdout=subprocess.PIPE, stderr=slave, env=env, text=True
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the pty closed: the process ended
            break
        if not chunk:
            break
        seen += chunk
    assert proc.stdout is not None
    out = proc.stdout.read()
    rc = proc.wait(timeout=60)
    os.close(master)
    return rc, out, seen.decode(errors="replace")


def test_cleanup_shows_progress_on_a_terminal_and_json_for_scripts(lethe, database_url, tmp_path):
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
    }
    rc, out, tty = run_with_terminal_stderr(["cleanup", "--dry-run"], env)
    assert rc == 0
    assert BAR.search(tty)  # tqdm's bar on the terminal
    assert out.splitlines()[0].startswith("cleanup (dry run")  # the table on stdout, no bar in it
    assert "\r" not in out
    rc, out, tty = run_with_terminal_stderr(["cleanup", "--dry-run", "--json"], env)
    assert rc == 0 and json.loads(out)["dry_run"] is True
    assert not BAR.search(tty)  # no bar for scripts
