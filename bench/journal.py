"""Reconciliation after a restore (issue: the deletion journal). Not a test.

A restored database holds N live files (default 100,000) with their objects still in the store, and the journal
says each of them was deleted after the backup: one `file.marked` entry per file (as deleteFile writes them),
then `file.objects_gone` and `file.row_removed` entries per purge of 1,000. Measured, side by side in one run:

- reconciled: `lethe restore reconcile` as the scheduler runs it (the journal read, every file marked again
  through mark_deleted in transactions of 1,000, the two-way check and the audit's listing), then the purge of
  those files as the worker runs it (purge_objects, 1,000 ids a job): files/s from the first read to the last row;
- raw limit: the same objects and rows removed by the plainest code (os.unlink, or minio's remove_objects, and
  one DELETE per 1,000 ids), as bench/purge.py measures it.

Target: reconciled at least 50% of the raw limit.

    python bench/journal.py reconcile [--files 100000] [--drivers fs]

With `lag`, the journal written at commit: `lethe api` as a real process (api.workers 2, api.threads 4, fs), its
files seeded as bench/http.py seeds them, measured in rounds that alternate the journal on and off:

- deleteFile requests/s and p99 under wrk (2 threads, 32 connections, 10 s), journal on against off;
- the journal's lag with the journal on: files deleted at `--rate` a second by a client of this script for
  `--seconds` (half through deleteFile, which one api of 2 processes may not reach on 2 cores, half through
  batchDeleteFiles of `--batch` ids), then each entry's commit time (its `at`) against the time its segment
  was written (the segment's modification time in the store): p50, p99 and max.

Targets: p99 lag under 1 s at 500 deletes/s; deleteFile with the journal within 10% of its rate without it.

    python bench/journal.py lag [--rate 500] [--seconds 20] [--rounds 3]
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import http.client
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
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
    wait_ready,
)
from common import seed as common_seed
from purge import raw_limit

from app.db import journal as journal_sql
from app.domain.journal import (
    FILE_MARKED,
    JOURNAL_PREFIX,
    OBJECTS_GONE,
    ROW_REMOVED,
    Entry,
    digest,
    parse_segment,
    read_segment,
    render_segment,
    segment_key,
)
from app.entry.token import mint_token
from app.lifecycle import restore
from app.lifecycle.purge import purge_files
from app.storage.fs import FsStore
from app.storage.journal import JournalSink

SEGMENT = 5000


def _bench_http():
    """bench/http.py (its name is the standard library's, so it is loaded by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_http", Path(__file__).with_name("http.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_journal(rt, ids: list[uuid.UUID]) -> None:
    """The journal of a database that deleted and purged every one of these files after its backup."""
    now = datetime.now(UTC)
    entries = [Entry(FILE_MARKED, now, files=(file_id,), via="file") for file_id in ids]
    for start in range(0, len(ids), 1000):
        chunk = tuple(ids[start : start + 1000])
        entries += [Entry(OBJECTS_GONE, now, files=chunk), Entry(ROW_REMOVED, now, files=chunk)]
    state = rt.db.read(journal_sql.state)
    sink = JournalSink(rt.store, state.installation_id)
    prev = state.head_digest
    for start in range(0, len(entries), SEGMENT):
        numbered = [
            Entry(e.kind, e.at, e.files, e.via, seq=state.position + start + index + 1)
            for index, e in enumerate(entries[start : start + SEGMENT])
        ]
        text = render_segment(numbered[0].seq, numbered[-1].seq, prev, numbered)
        sink.write(segment_key(state.installation_id, numbered[0].seq), text)
        prev = digest(text)


def reconciled(rt, ids: list[uuid.UUID]) -> float:
    write_journal(rt, ids)
    started = time.perf_counter()
    report = restore.reconcile(rt)
    assert report.files_marked == len(ids), report
    for start in range(0, len(ids), 1000):
        purge_files(rt, ids[start : start + 1000])
    elapsed = time.perf_counter() - started
    left = rt.db.read(lambda conn: conn.execute("SELECT count(*) FROM files").fetchone()[0])
    assert left == 0, f"{left} rows left"
    return elapsed


def paced_deletes(
    port: int, token: str, ids: list[uuid.UUID], rate: float, per_request: int = 1, threads: int = 24
) -> tuple[float, int]:
    """Delete every id at `rate` files a second on a shared schedule (a late request is sent at once, never
    skipped): deleteFile, or batchDeleteFiles of `per_request` ids. Returns the files/s achieved and how many
    answers were not 2xx."""
    import json

    started = time.monotonic() + 0.2
    lock = threading.Lock()
    state = {"next": 0, "bad": 0}
    requests = [ids[start : start + per_request] for start in range(0, len(ids), per_request)]
    rate = rate / per_request

    def work() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while True:
            with lock:
                index = state["next"]
                state["next"] += 1
            if index >= len(requests):
                break
            wait = started + index / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            batch = requests[index]
            if per_request == 1:
                conn.request("DELETE", f"/api/v1/files/{batch[0]}", headers={"Authorization": f"Bearer {token}"})
            else:
                conn.request(
                    "POST",
                    "/api/v1/files/batch-delete",
                    body=json.dumps({"ids": [str(i) for i in batch]}),
                    headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
                )
            response = conn.getresponse()
            response.read()
            if response.status >= 300:
                with lock:
                    state["bad"] += 1
        conn.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return len(ids) / (time.monotonic() - started), state["bad"]


def lags_of(root: Path, ids: set[uuid.UUID]) -> list[float]:
    """For each file.marked entry of these files: from its commit to its segment's write, in seconds."""
    store = FsStore(str(root))
    found = []
    for listed in store.list_prefix(JOURNAL_PREFIX):
        installation = uuid.UUID(listed.key[len(JOURNAL_PREFIX) :].split("/", 1)[0])
        segment = parse_segment(listed.key, installation)
        if segment is None:
            continue
        written = os.stat(root / listed.key).st_mtime
        for entry in read_segment(segment, store.get(listed.key).decode()).entries:
            if entry.kind == FILE_MARKED and set(entry.files) & ids:
                found.append(written - entry.at.timestamp())
    return found


def cpu_seconds(api_pid: int) -> tuple[float, float]:
    """CPU seconds spent so far by the api (the gunicorn master and its workers) and by every PostgreSQL process
    of the machine: steadier than a rate on a machine whose neighbours come and go."""
    import psutil

    def spent(process) -> float:
        try:
            times = process.cpu_times()
            return times.user + times.system
        except psutil.Error:
            return 0.0

    api = psutil.Process(api_pid)
    api_cpu = spent(api) + sum(spent(child) for child in api.children(recursive=True))
    pg_cpu = sum(spent(process) for process in psutil.process_iter(["name"]) if process.info["name"] == "postgres")
    return api_cpu, pg_cpu


def lag_round(journal_on: bool, url: str, broker_url: str, workdir: Path, args, bench_http) -> dict:
    objects = workdir / f"objects-{int(journal_on)}"
    shutil.rmtree(objects, ignore_errors=True)
    store = FsStore(str(objects))
    rt = make_runtime(url, store)
    reset_tables(rt)
    rt.db.read(lambda conn: conn.execute("DELETE FROM journal_pending"))
    paced_n = int(args.rate * args.seconds) if journal_on else 0
    ids = common_seed(rt, store, args.files + paced_n, events=2, objects=False)
    for table in ("files", "events", "outbox", "journal_pending", "journal_state"):  # the same start for each side
        rt.db.read(lambda conn, table=table: conn.execute(f"VACUUM ANALYZE {table}"))
    rt.db.read(lambda conn: conn.execute("CHECKPOINT"))
    rt.close()
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_FS_ROOT": str(objects),
        "LETHE_API_PORT": str(port),
        "LETHE_LOG_LEVEL": "WARNING",
        "LETHE_JOURNAL_ENABLED": "true" if journal_on else "false",
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"metrics-{int(journal_on)}-{time.monotonic_ns()}"),
    }
    if args.linger:
        env["LETHE_JOURNAL_WRITE_LINGER"] = args.linger
    Path(env["PROMETHEUS_MULTIPROC_DIR"]).mkdir()
    proc = bench_http.start_api(ROOT, env, workdir / f"api-{int(journal_on)}.log")
    base = f"http://127.0.0.1:{port}"
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    try:
        wait_ready(base, proc, timeout=60)
        ids_file = workdir / "ids"
        ids_file.write_text("\n".join(str(i) for i in ids[: args.files]) + "\n")
        before = cpu_seconds(proc.pid)
        result = bench_http.wrk(
            base, bench_http.LUA, {"BENCH_TOKEN": token, "BENCH_IDS": str(ids_file), "BENCH_METHOD": "DELETE"}, args
        )
        after = cpu_seconds(proc.pid)
        result["api_cpu_ms"] = (after[0] - before[0]) / result["requests"] * 1000
        result["pg_cpu_ms"] = (after[1] - before[1]) / result["requests"] * 1000
        if paced_n:
            single, batched = ids[args.files : args.files + paced_n // 2], ids[args.files + paced_n // 2 :]
            result["paced"] = {}
            for name, paced, per_request in (
                ("deleteFile", single, 1),
                (f"batch of {args.batch}", batched, args.batch),
            ):
                rate, bad = paced_deletes(port, token, paced, args.rate, per_request)
                rt = make_runtime(url, store)
                try:
                    deadline = time.monotonic() + 60
                    while rt.db.read(journal_sql.pending_count) and time.monotonic() < deadline:
                        time.sleep(0.1)
                finally:
                    rt.close()
                result["paced"][name] = (rate, bad, lags_of(objects, set(paced)))
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(30)
    return result


def lag(args) -> None:
    bench_http = _bench_http()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    args.threads, args.connections, args.duration = 2, 32, 10
    print(
        f"machine: {machine()}; wrk -t2 -c32 -d10s on deleteFile; paced deleteFile at {args.rate:g}/s for "
        f"{args.seconds:g} s; journal on and off alternating, {args.rounds} round(s)"
    )
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-journal-"))
    rows = []
    try:
        with bench_database() as url, bench_broker_url() as broker_url:
            for round_ in range(1, args.rounds + 1):
                for journal_on in (True, False) if round_ % 2 else (False, True):  # neither side always first
                    rows.append((round_, journal_on, lag_round(journal_on, url, broker_url, workdir, args, bench_http)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        "\n| round | journal | wrk deleteFile requests/s | p99 | api CPU a request | PostgreSQL CPU a request | "
        "non-2xx |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for round_, _journal_on, r in rows:
        print(
            f"| {round_} | {'on' if journal_on else 'off'} | {r['rps']:,.0f} | {r['p99_us'] / 1000:.1f} ms | "
            f"{r['api_cpu_ms']:.2f} ms | {r['pg_cpu_ms']:.2f} ms | {r['non_2xx']} |"
        )
    print(
        f"\n| round | paced at {args.rate:g} files/s through | files/s reached | lag p50 | lag p99 | lag max | "
        "entries | non-2xx |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for round_, _journal_on, r in rows:
        for name, (rate, bad, lags) in r.get("paced", {}).items():
            lags = sorted(lags)
            p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else float("nan")
            print(
                f"| {round_} | {name} | {rate:,.0f} | {statistics.median(lags) * 1000:.0f} ms | {p99 * 1000:.0f} ms "
                f"| {lags[-1] * 1000:.0f} ms | {len(lags):,} | {bad} |"
            )
    for round_ in range(1, args.rounds + 1):
        on = next(r for n, j, r in rows if n == round_ and j)
        off = next(r for n, j, r in rows if n == round_ and not j)
        print(
            f"round {round_}: deleteFile with the journal {on['rps'] / off['rps']:.0%} of without "
            f"(target >= 90%); CPU a request (api + PostgreSQL) "
            f"{(off['api_cpu_ms'] + off['pg_cpu_ms']) / (on['api_cpu_ms'] + on['pg_cpu_ms']):.0%} of without's"
        )
    ons = sorted(r["rps"] for _, j, r in rows if j)
    offs = sorted(r["rps"] for _, j, r in rows if not j)
    print(f"median: deleteFile with the journal {statistics.median(ons) / statistics.median(offs):.0%} of without")


def reconcile(args) -> None:
    print(f"machine: {machine()}; files: {args.files}")
    with bench_database() as url, tempfile.TemporaryDirectory() as workdir, moto_server() as endpoint:
        for driver in args.drivers:
            rt = make_runtime(url, make_store(driver, endpoint, workdir))
            try:
                ids = common_seed(rt, rt.store, args.files, size=64)
                seconds = reconciled(rt, ids)
                rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))
                raw_ids = common_seed(rt, rt.store, args.files, size=64)
                raw = raw_limit(rt, raw_ids)
            finally:
                rt.close()
            print(
                f"{driver}: reconciled and purged {args.files / seconds:,.0f} files/s ({seconds:.1f} s); raw limit "
                f"{args.files / raw:,.0f} files/s; reconciled/raw {raw / seconds:.0%}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode")
    rec = modes.add_parser("reconcile", help="reconciliation after a restore against the purge's raw limit")
    rec.add_argument("--files", type=int, default=100_000)
    rec.add_argument("--drivers", nargs="+", default=["fs"])
    lagging = modes.add_parser("lag", help="the journal's lag at a paced delete rate, deleteFile on and off")
    lagging.add_argument("--rate", type=float, default=500)
    lagging.add_argument("--seconds", type=float, default=20)
    lagging.add_argument("--rounds", type=int, default=3)
    lagging.add_argument("--files", type=int, default=20_000, help="files seeded for wrk's deletes")
    lagging.add_argument("--linger", help="journal.write_linger of the api (default: the configuration's)")
    lagging.add_argument("--batch", type=int, default=5, help="ids a batchDeleteFiles request of the paced run")
    args = parser.parse_args()
    if args.mode == "lag":
        lag(args)
    else:
        if args.mode is None:
            args.files, args.drivers = 100_000, ["fs"]
        reconcile(args)


if __name__ == "__main__":
    main()
