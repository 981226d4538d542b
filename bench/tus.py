"""tus upload speed beside the native API (issue 25). Not a test.

One client, one file, through `lethe dev` (one process) with the fs driver and with moto's S3 server: the native
API (8 MiB parts, one PUT each), then tus with tuspy in 1 MiB chunks (below a part: every PATCH rewrites the
tail, the cost of arbitrary PATCH sizes), in 8 MiB chunks (a part each), and one PATCH of the whole file (what
tus-js-client sends by default).

    python bench/tus.py [--size 64MiB]

Needs PostgreSQL from DATABASE_URL (else an embedded server); moto from the test dependencies.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import OWNER, SECRET, bench_database, free_port, machine, wait_ready
from transfer import make_data, start, upload

from app.entry.token import mint_token
from app.platform.config.keys import parse_size

MiB = 1024 * 1024


def tus_upload(port: int, token: str, data: bytes, chunk_size: int) -> float:
    """tuspy (the PyPI client) uploads the bytes in chunks of chunk_size: seconds, completion included."""
    from tusclient import client

    started = time.perf_counter()
    tus = client.TusClient(f"http://127.0.0.1:{port}/api/v1/tus", headers={"Authorization": f"Bearer {token}"})
    tus.uploader(
        file_stream=io.BytesIO(data),
        chunk_size=chunk_size,
        metadata={"filename": "bench.bin", "filetype": "application/octet-stream"},
    ).upload()
    return time.perf_counter() - started


def moto_endpoint(workdir: Path):
    """moto's S3 server on loopback (its objects spooled under workdir)."""
    from moto.server import ThreadedMotoServer

    os.environ["TMPDIR"] = str(workdir)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    return server, f"127.0.0.1:{server._port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB")
    args = parser.parse_args()
    size = parse_size(args.size)
    workdir = Path(tempfile.mkdtemp(prefix="lethe-bench-tus-"))
    token = mint_token(SECRET, OWNER, ("files:read", "files:write"))
    source = workdir / "data.bin"
    sha256 = make_data(source, size)
    data = source.read_bytes()
    print(f"machine: {machine()}; {size // MiB} MiB from one client through lethe dev, 8 MiB parts")
    server, endpoint = moto_endpoint(workdir)
    try:
        with bench_database() as url:
            for driver in ("fs", "s3"):
                port = free_port()
                env = {
                    "PATH": os.environ["PATH"],
                    "LETHE_DATABASE_URL": url,
                    "LETHE_AUTH_JWT_SECRET": SECRET,
                    "LETHE_FILE_FS_ROOT": str(workdir / "objects"),
                    "LETHE_API_PORT": str(port),
                    "LETHE_FILE_MAX_SIZE": str(size),
                    "LETHE_LOG_LEVEL": "WARNING",
                    "LETHE_FILE_STORAGE_DRIVER": driver,
                    "PROMETHEUS_MULTIPROC_DIR": str(workdir / f"m-{driver}"),
                }
                if driver == "s3":
                    env.update(
                        {
                            "LETHE_FILE_S3_ENDPOINT": endpoint,
                            "LETHE_FILE_S3_BUCKET": "bench-tus",
                            "LETHE_FILE_S3_ACCESS_KEY": "testing",
                            "LETHE_FILE_S3_SECRET_KEY": "testing",
                            "LETHE_FILE_S3_REGION": "us-east-1",
                            "LETHE_FILE_S3_SECURE": "false",
                            "LETHE_FILE_S3_CREATE_BUCKET": "true",
                        }
                    )
                os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
                proc = start("dev", env, workdir)
                try:
                    wait_ready(f"http://127.0.0.1:{port}", proc)
                    seconds, _ = upload(port, token, source, size, sha256)
                    rows = [("native API, 8 MiB parts", seconds)]
                    for label, chunk in (
                        ("tus (tuspy), 1 MiB chunks", MiB),
                        ("tus (tuspy), 8 MiB chunks", 8 * MiB),
                        ("tus, the file in one PATCH", size),
                    ):
                        rows.append((label, tus_upload(port, token, data, chunk)))
                    for label, seconds in rows:
                        print(f"  {driver:<3} {label:<32} {size / MiB / seconds:8.1f} MiB/s")
                finally:
                    os.killpg(proc.pid, 15)
                    proc.wait(30)
                    shutil.rmtree(workdir / "objects", ignore_errors=True)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
