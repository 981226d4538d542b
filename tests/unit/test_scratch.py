"""The suite's temporary folders in memory (tests/support/scratch.py): only on a tmpfs, and a dead run's folder goes."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import scratch


def test_a_folder_of_a_run_that_is_gone_is_removed_and_a_living_ones_stays(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch, "SHM", tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"{scratch.PREFIX}{int(dead.stdout)}-abc"
    living = tmp_path / f"{scratch.PREFIX}{os.getpid()}-def"
    other = tmp_path / "someone-elses"
    for folder in (gone, living, other):
        (folder / "inside").mkdir(parents=True)
    scratch.forget_stale()
    assert not gone.exists() and living.exists() and other.exists()


def test_only_a_tmpfs_with_room_and_not_when_turned_off(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch, "SHM", tmp_path)  # a folder of the disk, not a tmpfs
    assert scratch.basetemp() is None
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda path: True)
    monkeypatch.setattr(scratch, "ROOM", 1 << 62)  # more than any machine has
    assert scratch.basetemp() is None
    monkeypatch.setattr(scratch, "ROOM", 1)
    made = scratch.basetemp()
    assert made is not None and made.parent == tmp_path and made.name.startswith(f"{scratch.PREFIX}{os.getpid()}-")
    monkeypatch.setenv("LETHE_TEST_TMPFS", "0")
    assert scratch.basetemp() is None
