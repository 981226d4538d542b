"""Delete-to-gone latency (issue 11). Not a test.

It runs api, worker and scheduler as real processes (their defaults) on RabbitMQ and a database of its own,
with each driver (fs; s3 on moto's server in a process of its own), seeds files, deletes them over HTTP, and
reports p50/p99 of the time from the 204 to the moment the file's row is gone, checked every 10 ms. The
purge removes a file's row only after its objects (D7), and the script checks the objects of every file
too, once its row is gone.

- one at a time: a delete, then wait until that file is gone, 100 times;
- at a rate: 200 deletes/s for 5 s (open loop: each delete is sent on schedule, whatever came before).

    python bench/latency.py [--drivers fs s3] [--rate 200] [--seconds 5]

Targets: p99 < 1 s idle, < 2 s at 200 deletes/s.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (
    OWNER,
    ROOT,
    SECRET,
    bench_broker_url,
    bench_database,
    free_port,
    machine,
    make_runtime,
    make_store,
    moto_server,
    reset_tables,
    seed,
)

from app.domain.keys import original_key
from app.entry.token import mint_token


def start(role: str, env: dict, workdir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "app.entry", role],
        cwd=ROOT,
        env=env,
        stdout=open(workdir / f"{role}.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


class Watcher:
    """Polls the database every 10 ms for the rows of deleted files; records when each one is gone."""

    def __init__(self, rt):
        self.rt = rt
        self.deleted_at: dict[uuid.UUID, float] = {}
        self.gone_at: dict[uuid.UUID, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def deleted(self, file_id: uuid.UUID, at: float) -> None:
        with self._lock:
            self.deleted_at[file_id] = at

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                pending = [i for i in self.deleted_at if i not in self.gone_at]
            if pending:
                present = {
                    row.id
                    for row in self.rt.db.read(
                        lambda conn: conn.execute("SELECT id FROM files WHERE id = ANY(%s)", (pending,)).fetchall()
                    )
                }
                now = time.monotonic()
                with self._lock:
                    for file_id in pending:
                        if file_id not in present:
                            self.gone_at[file_id] = now
            time.sleep(0.01)

    def wait_all(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.gone_at) == len(self.deleted_at):
                    return
            time.sleep(0.05)
        raise SystemExit("some deleted files were not purged in time")

    def latencies(self) -> list[float]:
        with self._lock:
            return sorted(self.gone_at[i] - self.deleted_at[i] for i in self.deleted_at)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


def delete(port: int, token: str, file_id: uuid.UUID, local: threading.local) -> float:
    if not hasattr(local, "conn"):
        local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    local.conn.request("DELETE", f"/api/v1/files/{file_id}", headers={"Authorization": f"Bearer {token}"})
    response = local.conn.getresponse()
    response.read()
    if response.status != 204:
        raise SystemExit(f"deleteFile answered {response.status}")
    return time.monotonic()


def run_driver(driver: str, url: str, broker_url: str, endpoint: str, workdir: Path, args) -> dict:
    store = make_store(driver, endpoint, str(workdir))
    rt = make_runtime(url, store)
    reset_tables(rt)
    one_at_a_time = 100
    at_rate = args.rate * args.seconds
    ids = seed(rt, store, one_at_a_time + at_rate)
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_API_PORT": str(port),
        "LETHE_LOG_LEVEL": "WARNING",
        "LETHE_FILE_STORAGE_DRIVER": driver,
        "LETHE_METRICS_PORT": str(free_port()),
    }
    if driver == "fs":
        env["LETHE_FILE_FS_ROOT"] = store.root
    else:
        env.update(
            {
                "LETHE_FILE_S3_ENDPOINT": endpoint,
                "LETHE_FILE_S3_BUCKET": store.bucket,
                "LETHE_FILE_S3_ACCESS_KEY": "testing",
                "LETHE_FILE_S3_SECRET_KEY": "testing",
                "LETHE_FILE_S3_REGION": "us-east-1",
                "LETHE_FILE_S3_SECURE": "false",
            }
        )
    procs = []
    for role in ("api", "worker", "scheduler"):
        role_env = dict(env, PROMETHEUS_MULTIPROC_DIR=str(workdir / f"metrics-{driver}-{role}"))
        if role == "scheduler":
            role_env["LETHE_METRICS_PORT"] = str(free_port())
        procs.append(start(role, role_env, workdir))
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    results = {}
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz")
        time.sleep(3)  # the worker and the scheduler start their consumers
        local = threading.local()
        # One at a time
        watcher = Watcher(rt)
        for file_id in ids[:one_at_a_time]:
            watcher.deleted(file_id, delete(port, token, file_id, local))
            watcher.wait_all()
        results["one at a time"] = watcher.latencies()
        watcher.stop()
        # At a rate, open loop
        watcher = Watcher(rt)
        started = time.monotonic()

        def delete_and_watch(file_id):  # the watch starts at the 204, not when the run is over
            watcher.deleted(file_id, delete(port, token, file_id, local))

        with ThreadPoolExecutor(16) as pool:
            futures = []
            for index, file_id in enumerate(ids[one_at_a_time:]):
                due = started + index / args.rate
                time.sleep(max(0.0, due - time.monotonic()))
                futures.append(pool.submit(delete_and_watch, file_id))
            for future in futures:
                future.result()
        sent_rate = at_rate / (time.monotonic() - started)
        watcher.wait_all(120)
        results[f"{args.rate}/s (sent {sent_rate:.0f}/s)"] = watcher.latencies()
        watcher.stop()
        left = sum(1 for file_id in ids if store.head(original_key(file_id)) is not None)
        if left:
            raise SystemExit(f"{left} originals still in the store after their rows went")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        rt.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drivers", nargs="+", default=["fs", "s3"])
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-latency-"))
    print(f"machine: {machine()}")
    print("| driver | load | deletes | p50 | p99 | max |")
    print("| --- | --- | --- | --- | --- | --- |")
    try:
        with bench_database() as url, moto_server() as endpoint, bench_broker_url() as broker_url:
            for driver in args.drivers:
                for load, values in run_driver(driver, url, broker_url, endpoint, workdir, args).items():
                    print(
                        f"| {driver} | {load} | {len(values)} | {percentile(values, 0.5) * 1000:.0f} ms | "
                        f"{percentile(values, 0.99) * 1000:.0f} ms | {values[-1] * 1000:.0f} ms |",
                        flush=True,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
