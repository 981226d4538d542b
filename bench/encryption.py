"""Per-file keys: uploads and downloads of sealed files against the same without sealing, in one run. Not a test.

For each store (fs, and S3 on moto's server in a process of its own) and each mode (file.encryption off, on),
alternating, `--rounds` times: a fresh `lethe api` (its defaults: 2 gunicorn workers of 4 threads); one client
uploads a file of `--size` (http.client, parts in sequence, then the completion, whose sha256 check reads the original once
on S3 and, sealed, on fs too); then wrk (-t2 -c4, `--duration` s) downloads it whole, and asks for one 1 MiB
range in its middle, and the whole file as a range (`bytes=0-`: a plain file's bytes then pass through Python as a
sealed file's always do; a plain whole download on fs is the server's sendfile). The figure of each mode is its best round; the table gives sealed / plain.

    python bench/encryption.py [--size 256MiB] [--s3-size 64MiB] [--duration 10] [--rounds 2]

Needs PostgreSQL from DATABASE_URL (else an embedded server), RabbitMQ from BROKER_URL, and wrk (Debian).
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
from common import OWNER, SECRET, bench_broker_url, bench_database, machine, moto_server, wait_ready
from serve import api_env, cpu_seconds, start, stop, wrk
from transfer import make_data, upload

from app.entry.token import mint_token
from app.platform.config.keys import parse_size
from app.platform.keys import generate_entry

MiB = 1024 * 1024
KEYRING = generate_entry("bench")  # one for the run: every round's api opens the files the rounds before sealed


def one_round(
    url: str,
    broker_url: str,
    workdir: Path,
    data: Path,
    digest: str,
    sealed: bool,
    duration: int,
    token: str,
    store_env: dict,
) -> dict:
    env = api_env(
        url,
        broker_url,
        workdir,
        LETHE_FILE_ENCRYPTION="on" if sealed else "off",
        LETHE_FILE_KEYRING=KEYRING,
        **store_env,
    )
    api = start([sys.executable, "-m", "app.entry", "api"], env, workdir / f"api-{uuid.uuid4().hex[:6]}.log")
    base = f"http://127.0.0.1:{env['LETHE_API_PORT']}"
    try:
        wait_ready(base, api)
        size = data.stat().st_size
        seconds, file_id = upload(int(env["LETHE_API_PORT"]), token, data, size, digest)
        uploaded = size / seconds
        with psycopg.connect(url, autocommit=True) as conn:  # no scanner here: deliverable at once
            conn.execute("UPDATE files SET scan_status = 'skipped' WHERE id = %s", (file_id,))
        content = f"{base}/api/v1/files/{file_id}/content"
        cpu: dict[str, float] = {}

        def measured(name: str, run) -> tuple[float, float]:
            # the api's CPU seconds per MiB (per range) served: steadier than the rate, which shares two cores
            # with wrk
            before = cpu_seconds(api)
            rate = run()
            cpu[name] = (cpu_seconds(api) - before) / (duration * (rate[1] if name == "range" else rate[0] / MiB))
            return rate

        whole = measured("download", lambda: wrk(content, duration, token))
        # the whole file as a range: a plain file's bytes then go through Python too, as a sealed file's always do
        through_python = measured("download_ranged", lambda: wrk_range(content, duration, token, "bytes=0-"))
        middle = size // 2
        ranged = measured("range", lambda: wrk_range(content, duration, token, f"bytes={middle}-{middle + MiB - 1}"))
    finally:
        stop(api)
    return {
        "upload": uploaded,
        "download": whole[0],
        "download_ranged": through_python[0],
        "range": ranged[1],
        "cpu": cpu,
    }


def wrk_range(url: str, duration: int, token: str, byte_range: str) -> tuple[float, float]:
    """wrk with a Range header: (bytes per second, requests per second)."""
    import re
    import subprocess

    done = subprocess.run(
        [
            "wrk",
            "-t",
            "2",
            "-c",
            "4",
            "-d",
            f"{duration}s",
            "-H",
            f"Authorization: Bearer {token}",
            "-H",
            f"Range: {byte_range}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", done.stdout).group(1))
    units = {"B": 1, "KB": 1024, "MB": MiB, "GB": 1024 * MiB}
    value, unit = re.search(r"Transfer/sec:\s+([\d.]+)(\w+)", done.stdout).groups()
    return float(value) * units[unit], rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB", help="the file on fs")
    parser.add_argument("--s3-size", default="64MiB", help="the file on S3 (moto keeps it in memory)")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stores", default="fs,s3")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-encryption-"))
    print(f"machine: {machine()}")
    results: dict[tuple[str, bool], list[dict]] = {}
    try:
        with bench_database() as url, bench_broker_url() as broker_url:
            for store in args.stores.split(","):
                size = parse_size(args.size if store == "fs" else args.s3_size)
                data = workdir / f"data-{store}.bin"
                digest = make_data(data, size)

                def rounds(store_env: dict) -> None:
                    for _ in range(args.rounds):
                        for sealed in (False, True):
                            results.setdefault((store, sealed), []).append(
                                one_round(
                                    url, broker_url, workdir, data, digest, sealed, args.duration, token, store_env
                                )
                            )

                if store == "fs":
                    rounds({"LETHE_FILE_FS_ROOT": str(workdir / "objects")})
                else:
                    with moto_server() as endpoint:
                        rounds(
                            {
                                "LETHE_FILE_STORAGE_DRIVER": "s3",
                                "LETHE_FILE_S3_ENDPOINT": endpoint,
                                "LETHE_FILE_S3_BUCKET": f"bench-{uuid.uuid4().hex[:8]}",
                                "LETHE_FILE_S3_ACCESS_KEY": "testing",
                                "LETHE_FILE_S3_SECRET_KEY": "testing",
                                "LETHE_FILE_S3_REGION": "us-east-1",
                                "LETHE_FILE_S3_SECURE": "false",
                                "LETHE_FILE_S3_CREATE_BUCKET": "true",
                                "LETHE_FILE_PART_SIZE": "8MiB",
                            }
                        )
                data.unlink()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\n| store | measure | plain (best) | sealed (best) | sealed / plain | every round, plain / sealed |")
    print("| --- | --- | --- | --- | --- | --- |")
    for store in args.stores.split(","):
        for measure, unit in (
            ("upload", "MiB/s"),
            ("download", "MiB/s"),
            ("download_ranged", "MiB/s"),
            ("range", "ranges/s"),
        ):
            plain = [r[measure] for r in results[(store, False)]]
            sealed = [r[measure] for r in results[(store, True)]]
            scale = MiB if unit == "MiB/s" else 1
            shown = " ".join(f"{p / scale:,.0f}/{s / scale:,.0f}" for p, s in zip(plain, sealed, strict=True))
            print(
                f"| {store} | {measure} ({unit}) | {max(plain) / scale:,.0f} | {max(sealed) / scale:,.0f} | "
                f"**{max(sealed) / max(plain):.0%}** | {shown} |"
            )
    print("\nThe api's CPU per MiB (per 1 MiB range) served, least of the rounds; plain / sealed is the share of its")
    print("CPU that sealing leaves to serving (wrk's own CPU is not counted):\n")
    print("| store | measure | plain (ms) | sealed (ms) | plain / sealed |")
    print("| --- | --- | --- | --- | --- |")
    for store in args.stores.split(","):
        for measure in ("download", "download_ranged", "range"):
            plain = min(r["cpu"][measure] for r in results[(store, False)]) * 1000
            sealed = min(r["cpu"][measure] for r in results[(store, True)]) * 1000
            print(f"| {store} | {measure} | {plain:.3f} | {sealed:.3f} | **{plain / sealed:.0%}** |")


if __name__ == "__main__":
    main()
