"""The fs root full (ENOSPC) or read-only (EROFS): an upload answers 503 `storage_unavailable`, nothing
half-written stays, and /readyz fails below `file.fs.min_free_bytes` and on a root it cannot write.

The file system is real: a 2 MiB tmpfs mounted for the test, remounted read-only for the EROFS case. Where
mounting is not permitted (not root, no CAP_SYS_ADMIN) the same checks run on a directory whose full and
read-only states are simulated: ENOSPC by a free-space floor above the disk's free space, EROFS by a
directory without write permission (which an unprivileged process cannot write either). The test says
which one ran in its output.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from app.storage.fs import TMP_DIR, FsStore
from tests.support.helpers import problem
from tests.support.lethe import ALEX, Lethe

pytestmark = pytest.mark.faults


def mount_tmpfs(path, size="2m") -> bool:
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    root = tmp_path / "small"
    real = mount_tmpfs(root)
    print(f"disk drill on {'a real 2 MiB tmpfs' if real else 'a simulated full/read-only directory'}")
    yield root, real
    if real:
        subprocess.run(["umount", "-l", str(root)], check=False)


def leftovers(root) -> list[str]:
    tmp = os.path.join(root, TMP_DIR)
    return os.listdir(tmp) if os.path.isdir(tmp) else []


def make(database_url, clock, root, **settings) -> Lethe:
    return Lethe(
        database_url,
        FsStore(str(root), min_free_bytes=int(settings.pop("min_free", 0))),
        clock,
        **{"file.part_size": "1MiB", **settings},
    )


def test_a_full_disk_answers_503_and_leaves_nothing_half_written(database_url, clock, small_disk):
    root, real = small_disk
    from tests.support.database import truncate_all

    truncate_all(database_url)
    lethe = make(database_url, clock, root)
    try:
        data = os.urandom(1024 * 1024)
        if real:
            # Fill the tmpfs so that one more MiB cannot fit
            with open(os.path.join(root, "filler"), "wb") as filler:
                filler.write(b"\0" * (1536 * 1024))
        else:
            lethe.raw_store.min_free_bytes = lethe.raw_store.free_bytes() + 1
        created = lethe.start_upload(ALEX, data)
        file_id = created["file"]["id"]
        response = lethe.call(
            "PUT",
            f"/api/v1/uploads/{file_id}/parts/1",
            ALEX,
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        problem(response, 503, "storage_unavailable")
        assert response.headers["Retry-After"] == "5"
        assert leftovers(root) == []
        # readiness fails below the floor
        lethe.raw_store.min_free_bytes = 1024 * 1024
        ready = lethe.call("GET", "/readyz")
        assert ready.status_code == 503 and "store" in ready.json["detail"]
        # space comes back: the same part is taken, readiness recovers
        if real:
            os.unlink(os.path.join(root, "filler"))
        lethe.raw_store.min_free_bytes = 0
        response = lethe.call(
            "PUT",
            f"/api/v1/uploads/{file_id}/parts/1",
            ALEX,
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert response.status_code == 200, response.json
        assert lethe.call("GET", "/readyz").status_code == 200
    finally:
        lethe.close()


def test_a_read_only_root_answers_503_and_readiness_says_so(database_url, clock, small_disk):
    root, real = small_disk
    from tests.support.database import truncate_all

    truncate_all(database_url)
    lethe = make(database_url, clock, root)
    try:
        assert lethe.call("GET", "/readyz").status_code == 200
        if real:
            subprocess.run(["mount", "-o", "remount,ro", str(root)], check=True)
        else:
            os.chmod(os.path.join(root, TMP_DIR), 0o500)
        data = b"a part of a file " * 10
        created = lethe.start_upload(ALEX, data, name=f"{uuid.uuid4()}.txt")
        response = lethe.call(
            "PUT",
            f"/api/v1/uploads/{created['file']['id']}/parts/1",
            ALEX,
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        problem(response, 503, "storage_unavailable")
        ready = lethe.call("GET", "/readyz")
        assert ready.status_code == 503 and "store" in ready.json["detail"]
    finally:
        if real:
            subprocess.run(["mount", "-o", "remount,rw", str(root)], check=False)
        else:
            os.chmod(os.path.join(root, TMP_DIR), 0o700)
        lethe.close()
