"""Purge throughput with 1 and 2 worker processes on a backlog (issue 11, scaling out). Not a test.

It seeds N files marked deleted (default 50,000; fs driver), publishes their purge jobs (1,000 ids a job, as
the catch-up and message deletes do) to RabbitMQ, starts `lethe worker` with `worker.processes` = 1, then 2
(4 threads each), and reports files/s until every row is gone.

    python bench/scale.py [--files 50000] [--processes 1 2]
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from common import (
    ROOT,
    bench_broker_url,
    bench_database,
    free_port,
    machine,
    make_runtime,
    mark_all_deleted,
    reset_tables,
    seed,
)

from app.db.publisher import message_for
from app.platform import jobs
from app.platform.jobs.broker import build_broker
from app.storage.fs import FsStore

BATCH = 1000


def run(processes: int, url: str, broker_url: str, workdir: Path, n: int) -> float:
    store = FsStore(str(workdir / f"objects-{processes}"))
    rt = make_runtime(url, store)
    reset_tables(rt)
    ids = seed(rt, store, n)
    mark_all_deleted(rt, ids)
    rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))  # the bench publishes its own jobs below
    broker = build_broker(broker_url)
    for index, start in enumerate(range(0, n, BATCH)):
        chunk = [str(file_id) for file_id in ids[start : start + BATCH]]
        broker.enqueue(message_for(10_000_000 * processes + index, jobs.PURGE_QUEUE, "purge_objects", (chunk,)))
    broker.close()
    env = {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_FILE_FS_ROOT": store.root,
        "LETHE_WORKER_PROCESSES": str(processes),
        "LETHE_LOG_LEVEL": "WARNING",
        "LETHE_METRICS_PORT": str(free_port()),
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-{processes}"),
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.entry", "worker"],
        cwd=ROOT,
        env=env,
        stdout=open(workdir / f"worker-{processes}.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        while rt.db.read(lambda conn: conn.execute("SELECT count(*) AS n FROM files").fetchone().n):
            if proc.poll() is not None:
                raise SystemExit(f"the worker exited with {proc.returncode}")
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        rt.close()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-scale-"))
    print(f"machine: {machine()}; {args.files:,} files marked deleted, purge jobs of {BATCH:,} ids (fs)")
    try:
        with bench_database() as url, bench_broker_url() as broker_url:
            for processes in args.processes:
                rate = run(processes, url, broker_url, workdir, args.files)
                print(f"| {processes} worker process(es) x 4 threads | {rate:,.0f} files/s |", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
