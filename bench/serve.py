"""Download speed and cost (issue: serving). Not a test.

1. fs, proxied: one file of `--size` (default 64 MiB) downloaded again and again with wrk (2 threads, 4
   connections, `--duration` s) from `lethe api` (gunicorn, its defaults: 2 workers of 4 threads), beside, in
   the same run, the minimal sendfile server: the same gunicorn, the same workers, a WSGI app of three lines
   that hands the same file to the server's sendfile (no authentication, no database). Target: Lethe at least
   90% of it.
2. S3 (moto in a process of its own), proxied against redirected: `--downloads` downloads of a file of each
   of `--s3-sizes` (default 8 MiB and 64 MiB) through the api, then as many with file.s3.download redirect (the api checks the row and answers 302; the
   client fetches the presigned URL from the store); the api's CPU seconds (its gunicorn processes) per
   download. Target: a redirect at most a tenth of a proxied one.

    python bench/serve.py [--size 64MiB] [--duration 10] [--downloads 100] [--s3-sizes 8MiB,64MiB]

Needs wrk (Debian: apt-get install wrk), PostgreSQL from DATABASE_URL (else an embedded server) and RabbitMQ
from BROKER_URL.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import psycopg
import requests
from common import OWNER, ROOT, SECRET, bench_broker_url, bench_database, free_port, machine, moto_server, wait_ready

from app.entry.token import mint_token
from app.platform.config.keys import parse_size

MiB = 1024 * 1024
RAW_APP = """
import os
def app(environ, start_response):
    handle = open(os.environ["BENCH_FILE"], "rb")
    start_response("200 OK", [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(os.fstat(handle.fileno()).st_size))])
    return environ["wsgi.file_wrapper"](handle)
"""


def start(args: list[str], env: dict, log: Path, cwd: Path = ROOT) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def wait_port(port: int, proc: subprocess.Popen) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise SystemExit("the server exited")
        try:
            requests.get(f"http://127.0.0.1:{port}/", timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.1)
    raise SystemExit("the server did not answer")


def wrk(url: str, duration: int, token: str | None = None) -> tuple[float, float]:
    """(bytes per second, requests per second) of wrk -t2 -c4 on one URL."""
    headers = ["-H", f"Authorization: Bearer {token}"] if token else []
    done = subprocess.run(
        ["wrk", "-t", "2", "-c", "4", "-d", f"{duration}s", *headers, url], capture_output=True, text=True, check=True
    )
    units = {"B": 1, "KB": 1024, "MB": MiB, "GB": 1024 * MiB}
    value, unit = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", done.stdout).groups()
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", done.stdout).group(1))
    return float(value) * units[unit], rate


def api_env(url: str, broker_url: str, workdir: Path, **extra: str) -> dict:
    return {
        "PATH": os.environ["PATH"],
        "LETHE_DATABASE_URL": url,
        "LETHE_BROKER_URL": broker_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_API_PORT": str(free_port()),
        "LETHE_LOG_LEVEL": "WARNING",
        "LETHE_FILE_MAX_SIZE": "1GiB",
        "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(dir=workdir),
        **extra,
    }


def upload(base: str, token: str, data_path: Path, url: str) -> str:
    """Upload a file through the api and make it deliverable (no scanner: its scan would be skipped)."""
    headers = {"Authorization": f"Bearer {token}"}
    size = data_path.stat().st_size
    created = requests.post(
        f"{base}/api/v1/uploads",
        headers=headers,
        timeout=30,
        json={"name": "bench.bin", "size_bytes": size, "mime_type": "application/octet-stream"},
    )
    created.raise_for_status()
    file_id, part_size = created.json()["file"]["id"], created.json()["upload"]["part_size"]
    with data_path.open("rb") as handle:
        for number in range(1, -(-size // part_size) + 1):
            requests.put(
                f"{base}/api/v1/uploads/{file_id}/parts/{number}",
                headers=headers,
                data=handle.read(part_size),
                timeout=120,
            ).raise_for_status()
    requests.post(f"{base}/api/v1/uploads/{file_id}/complete", headers=headers, timeout=120).raise_for_status()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE files SET scan_status = 'skipped' WHERE id = %s", (file_id,))
    return file_id


def cpu_seconds(proc: subprocess.Popen) -> float:
    """User and system CPU of a process and its children (gunicorn's workers)."""
    parent = psutil.Process(proc.pid)
    total = 0.0
    for each in [parent, *parent.children(recursive=True)]:
        times = each.cpu_times()
        total += times.user + times.system
    return total


def fs_proxied(url: str, broker_url: str, workdir: Path, size: int, duration: int, token: str) -> dict:
    data = workdir / "data.bin"
    with data.open("wb") as out:
        block = os.urandom(MiB)
        for _ in range(size // MiB):
            out.write(block)
    env = api_env(url, broker_url, workdir, LETHE_FILE_FS_ROOT=str(workdir / "objects"))
    api = start([sys.executable, "-m", "app.entry", "api"], env, workdir / "api.log")
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    try:
        wait_ready(base, api)
        file_id = upload(base, token, data, url)
        stored = next((workdir / "objects").rglob("orig-1"))
        raw_dir = workdir / "raw"
        raw_dir.mkdir()
        (raw_dir / "raw_app.py").write_text(RAW_APP)
        port = free_port()
        raw = start(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers",
                "2",
                "--threads",
                "4",
                "-k",
                "gthread",
                "--bind",
                f"127.0.0.1:{port}",
                "raw_app:app",
            ],
            {"PATH": os.environ["PATH"], "BENCH_FILE": str(stored)},
            workdir / "raw.log",
            cwd=raw_dir,
        )
        try:
            wait_port(port, raw)
            minimal = wrk(f"http://127.0.0.1:{port}/", duration)
            lethe = wrk(f"{base}/api/v1/files/{file_id}/content", duration, token)
            minimal_again = wrk(f"http://127.0.0.1:{port}/", duration)  # and once more, after: the same minute
        finally:
            stop(raw)
    finally:
        stop(api)
    best = max(minimal[0], minimal_again[0])
    return {"minimal": minimal, "minimal_again": minimal_again, "lethe": lethe, "share": lethe[0] / best}


def s3_costs(url: str, broker_url: str, workdir: Path, downloads: int, token: str, size: int) -> dict:
    data = workdir / "s3.bin"
    data.write_bytes(os.urandom(size))
    results = {}
    with moto_server() as endpoint:
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3 = {
            "LETHE_FILE_STORAGE_DRIVER": "s3",
            "LETHE_FILE_S3_ENDPOINT": endpoint,
            "LETHE_FILE_S3_BUCKET": bucket,
            "LETHE_FILE_S3_ACCESS_KEY": "testing",
            "LETHE_FILE_S3_SECRET_KEY": "testing",
            "LETHE_FILE_S3_REGION": "us-east-1",
            "LETHE_FILE_S3_SECURE": "false",
            "LETHE_FILE_S3_CREATE_BUCKET": "true",
        }
        file_id = None
        for mode in ("proxy", "redirect"):
            env = api_env(url, broker_url, workdir, LETHE_FILE_S3_DOWNLOAD=mode, **s3)
            api = start([sys.executable, "-m", "app.entry", "api"], env, workdir / f"api-{mode}.log")
            base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
            try:
                wait_ready(base, api)
                file_id = file_id or upload(base, token, data, url)
                session = requests.Session()
                headers = {"Authorization": f"Bearer {token}"}
                session.get(f"{base}/api/v1/files/{file_id}/content", headers=headers, timeout=60)  # warm
                before, started = cpu_seconds(api), time.monotonic()
                for _ in range(downloads):
                    answer = session.get(f"{base}/api/v1/files/{file_id}/content", headers=headers, timeout=60)
                    if answer.status_code == 302:  # the client fetches the bytes from the store itself
                        fetched = requests.get(answer.headers["Location"], timeout=60)
                        assert len(fetched.content) == size
                    else:
                        assert answer.status_code == 200 and len(answer.content) == size
                elapsed = time.monotonic() - started
                results[mode] = {
                    "api_cpu_per_download_ms": 1000 * (cpu_seconds(api) - before) / downloads,
                    "seconds": elapsed,
                }
            finally:
                stop(api)
    results["ratio"] = results["redirect"]["api_cpu_per_download_ms"] / results["proxy"]["api_cpu_per_download_ms"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--downloads", type=int, default=100)
    parser.add_argument("--s3-sizes", default="8MiB,64MiB", help="the S3 file sizes, comma-separated")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-serve-"))
    print(f"machine: {machine()}")
    try:
        with bench_database() as url, bench_broker_url() as broker_url:
            fs = fs_proxied(url, broker_url, workdir, parse_size(args.size), args.duration, token)
            print(f"fs, {parse_size(args.size) // MiB} MiB, wrk -t2 -c4 -d{args.duration}s:")
            for label in ("minimal", "lethe", "minimal_again"):
                rate, requests_s = fs[label]
                print(f"  {label:<14} {rate / MiB:8.0f} MiB/s  {requests_s:6.1f} downloads/s")
            print(f"  lethe / best minimal: {fs['share']:.0%} (target >= 90%)")
            for s3_size in (parse_size(text) for text in args.s3_sizes.split(",")):
                s3 = s3_costs(url, broker_url, workdir, args.downloads, token, s3_size)
                print(f"S3 (moto), {s3_size // MiB} MiB, {args.downloads} downloads:")
                for mode in ("proxy", "redirect"):
                    print(
                        f"  {mode:<9} api CPU {s3[mode]['api_cpu_per_download_ms']:7.1f} ms a download, "
                        f"{s3[mode]['seconds']:.1f} s in all"
                    )
                print(f"  redirect / proxy: {s3['ratio']:.3f} (target <= 0.1)")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
