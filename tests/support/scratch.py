"""The suite's temporary folders in memory where the machine has room for them.

The tests write thousands of small objects through the fs driver (which syncs each to the disk before it
publishes it), SeaweedFS servers, PostgreSQL clusters and role folders under pytest's `tmp_path`. On a disk that
is all waiting for the disk; on /dev/shm (a tmpfs) a sync returns at once and nothing is kept after the run. Only
where /dev/shm is a tmpfs with room to spare: elsewhere pytest's own folder under the system's temporary folder
stays. `LETHE_TEST_TMPFS=0`, or `--basetemp`, keeps pytest's choice."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

SHM = Path("/dev/shm")
PREFIX = "lethe-pytest-"
ROOM = 8 * 1024**3  # a whole run writes about 2 GiB; the rest stays for the machine


def _is_tmpfs(path: Path) -> bool:
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            return any(line.split()[1:3] == [str(path), "tmpfs"] for line in mounts)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def forget_stale() -> None:
    """Remove the folders of runs whose pytest is gone (killed, or ended with a failure: kept for a look until
    the next run starts)."""
    for folder in SHM.glob(PREFIX + "*"):
        pid = folder.name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def basetemp() -> Path | None:
    """A new folder on /dev/shm for this run's temporary folders, or None where it is not a tmpfs with room."""
    if os.environ.get("LETHE_TEST_TMPFS", "1") == "0" or not _is_tmpfs(SHM):
        return None
    forget_stale()
    stats = os.statvfs(SHM)
    if stats.f_bavail * stats.f_frsize < ROOM:
        return None
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=SHM))
