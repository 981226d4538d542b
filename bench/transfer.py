"""Upload speed from one ordinary client (issue 24). Not a test.

One client sends the parts of an upload one after another (as curl loops and tus clients do), then completes
it, through `lethe api` (gunicorn, its defaults) and `lethe dev` (one process), fs driver; beside them, in the
same run, the raw limit: the same bytes written, hashed (sha256) and fsynced by the plainest code in one
process. Downloads are measured too. Then a `--big` upload (default 1 GiB) through `lethe api` while the api's
processes are sampled for their peak RSS: no whole part may stay in memory.

    python bench/transfer.py [--before REF] [--size 256MiB] [--big 1GiB] [--runs 1]

With `--before REF` the uploads and downloads are measured first with the code of an earlier commit (a git
worktree), in the same run.

Needs PostgreSQL from DATABASE_URL (else an embedded server) and RabbitMQ from BROKER_URL; the disk needs
about three times --big free while it runs (the upload's parts, the original, the client's file).
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
from common import OWNER, ROOT, SECRET, bench_broker_url, bench_database, free_port, machine, tree_of, wait_ready

from app.entry.token import mint_token
from app.platform.config.keys import parse_size

MiB = 1024 * 1024


def make_data(path: Path, size: int) -> str:
    """A file of `size` bytes that does not compress; returns its sha256."""
    digest = hashlib.sha256()
    block = os.urandom(MiB)
    with open(path, "wb") as out:
        for n in range(size // MiB):
            chunk = bytes([n % 251]) + block[1:]
            out.write(chunk)
            digest.update(chunk)
    return digest.hexdigest()


def raw_limit(source: Path, target: Path, part_size: int) -> float:
    """Write the bytes part by part (8 MiB reads, as a server receives them), hash them, fsync: seconds."""
    started = time.perf_counter()
    digest = hashlib.sha256()
    with open(source, "rb") as data, open(target, "wb") as out:
        while chunk := data.read(part_size):
            out.write(chunk)
            digest.update(chunk)
        out.flush()
        os.fsync(out.fileno())
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def call(
    conn: http.client.HTTPConnection, method: str, path: str, token: str, body=None, headers: dict | None = None
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}", **(headers or {})})
    response = conn.getresponse()
    return response.status, response.read()


def upload(port: int, token: str, source: Path, size: int, sha256: str) -> tuple[float, str]:
    """Create, send every part in sequence, complete: seconds, and the file id."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    status, body = call(
        conn,
        "POST",
        "/api/v1/uploads",
        token,
        json.dumps(
            {"name": "bench.bin", "size_bytes": size, "mime_type": "application/octet-stream", "sha256": sha256}
        ),
        {"Content-Type": "application/json"},
    )
    assert status == 201, body
    created = json.loads(body)
    file_id, part_size = created["file"]["id"], created["upload"]["part_size"]
    with open(source, "rb") as data:
        number = 0
        while chunk := data.read(part_size):
            number += 1
            status, body = call(
                conn,
                "PUT",
                f"/api/v1/uploads/{file_id}/parts/{number}",
                token,
                chunk,
                {"Content-Type": "application/octet-stream"},
            )
            assert status == 200, body
    status, body = call(
        conn, "POST", f"/api/v1/uploads/{file_id}/complete", token, b"{}", {"Content-Type": "application/json"}
    )
    assert status == 200, body
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed, file_id


def download(port: int, token: str, file_id: str, size: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    deadline = time.monotonic() + 30
    while True:  # deliverable once the worker recorded the scan (skipped: no scanner here)
        status, body = call(conn, "GET", f"/api/v1/files/{file_id}", token)
        if json.loads(body).get("scan_status") != "pending" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    started = time.perf_counter()
    conn.request("GET", f"/api/v1/files/{file_id}/content", headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    assert response.status == 200
    received = 0
    while chunk := response.read(MiB):
        received += len(chunk)
    assert received == size
    conn.close()
    return time.perf_counter() - started


class PeakRss:
    """Samples the resident memory of a process tree every 20 ms; `peak` is the largest one process had."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    self.peak = max(self.peak, process.memory_info().rss)
                except psutil.Error:
                    pass
            self._stop.wait(0.02)

    def __enter__(self) -> PeakRss:
        self._run_once_baseline()
        self._thread.start()
        return self

    def _run_once_baseline(self) -> None:
        self.baseline = max(p.memory_info().rss for p in [self.root, *self.root.children(recursive=True)])

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def start(role: str, env: dict, workdir: Path, source: Path = ROOT) -> subprocess.Popen:
    args = [sys.executable, "-m", "app.entry", role] + (["--port", env["LETHE_API_PORT"]] if role == "dev" else [])
    return subprocess.Popen(
        args,
        cwd=workdir,
        env=dict(env, PYTHONPATH=str(source)),
        stdout=open(workdir / f"{role}.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("--big", default="1GiB", help="the upload whose peak RSS is measured (0: none)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--before", help="a git ref to measure first, side by side")
    args = parser.parse_args()
    size, big = parse_size(args.size), parse_size(args.big)
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-transfer-"))
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    source = workdir / "data.bin"
    sha256 = make_data(source, size)
    rows = []
    stack = contextlib.ExitStack()
    sources = [(f"before ({args.before}): ", stack.enter_context(tree_of(args.before, workdir)))] if args.before else []
    sources.append(("", ROOT))
    print(f"machine: {machine()}; {size // MiB} MiB, parts in sequence from one client, fs driver")
    try:
        with bench_database() as url, bench_broker_url() as broker_url:
            part_size = 8 * MiB
            for run in range(args.runs):
                rows.append(
                    (
                        f"run {run + 1}: raw write+sha256+fsync",
                        "raw",
                        size / raw_limit(source, workdir / "raw.bin", part_size),
                    )
                )
                for (label, tree), role in [(src, role) for src in sources for role in ("api", "dev")]:
                    port = free_port()
                    objects = workdir / f"objects-{role}"
                    env = {
                        "PATH": os.environ["PATH"],
                        "LETHE_DATABASE_URL": url,
                        "LETHE_AUTH_JWT_SECRET": SECRET,
                        "LETHE_FILE_FS_ROOT": str(objects),
                        "LETHE_API_PORT": str(port),
                        "LETHE_FILE_MAX_SIZE": str(max(size, big)),
                        "LETHE_LOG_LEVEL": "WARNING",
                        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-{role}-{run}-{len(rows)}"),
                    }
                    if role == "api":
                        env["LETHE_BROKER_URL"] = broker_url
                    os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
                    proc = start(role, env, workdir, tree)
                    worker = (
                        start("worker", dict(env, LETHE_METRICS_PORT=str(free_port())), workdir, tree)
                        if role == "api"
                        else None
                    )
                    try:
                        wait_ready(f"http://127.0.0.1:{port}", proc)
                        seconds, file_id = upload(port, token, source, size, sha256)
                        rows.append((f"run {run + 1}: {label}upload through lethe {role}", "upload", size / seconds))
                        rows.append(
                            (
                                f"run {run + 1}: {label}download through lethe {role}",
                                "download",
                                size / download(port, token, file_id, size),
                            )
                        )
                    finally:
                        for process in (proc, worker):
                            if process is not None:
                                os.killpg(process.pid, 15)
                                process.wait(30)
                        shutil.rmtree(objects, ignore_errors=True)
            peaks = []
            if big:
                big_source = workdir / "big.bin"
                big_sha = make_data(big_source, big)
                source.unlink()
                for label, tree in sources:
                    port = free_port()
                    objects = workdir / "objects-big"
                    env = {
                        "PATH": os.environ["PATH"],
                        "LETHE_DATABASE_URL": url,
                        "LETHE_BROKER_URL": broker_url,
                        "LETHE_AUTH_JWT_SECRET": SECRET,
                        "LETHE_FILE_FS_ROOT": str(objects),
                        "LETHE_API_PORT": str(port),
                        "LETHE_FILE_MAX_SIZE": str(big),
                        "LETHE_LOG_LEVEL": "WARNING",
                        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-big-{len(peaks)}"),
                    }
                    os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"])
                    proc = start("api", env, workdir, tree)
                    try:
                        wait_ready(f"http://127.0.0.1:{port}", proc)
                        with PeakRss(proc.pid) as rss:
                            seconds, _ = upload(port, token, big_source, big, big_sha)
                        peaks.append((label, rss.baseline, rss.peak, big / seconds))
                    finally:
                        os.killpg(proc.pid, 15)
                        proc.wait(30)
                        shutil.rmtree(objects, ignore_errors=True)
    finally:
        stack.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| path | MiB/s | of the run's raw |\n| --- | --- | --- |")
    raw = 0.0
    for name, kind, rate in rows:
        raw = rate if kind == "raw" else raw  # each run's raw limit, measured just before its uploads
        print(f"| {name} | {rate / MiB:,.0f} | {rate / raw:.0%} |")
    print("\ntarget: upload >= 50% of the raw write+sha256+fsync of the same run")
    for label, baseline, top, rate in peaks:
        print(
            f"{label}{big // MiB} MiB upload through lethe api at {rate / MiB:,.0f} MiB/s: peak RSS of one api "
            f"process {top / MiB:,.0f} MiB (at rest {baseline / MiB:,.0f} MiB; a part is 8 MiB)"
        )


if __name__ == "__main__":
    main()
