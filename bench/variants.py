"""Image variants per second per core (issue: variants). Not a test.

The same photos (`--images` JPEGs of `--size` pixels, made here with Pillow: noise, so the encoder works), one
thread (VIPS_CONCURRENCY=1), side by side in one run:

1. the plainest code that makes the same three variants: pyvips' own thumbnail call in a bare loop, each of
   thumb-small, thumb-large and preview from the original's bytes, saved as WebP (Q 80, effort 2, no metadata);
2. Lethe's imaging port (app/content/imaging.py): the header read, the pixel budget, the deadline, the preview
   decoded from the original and the thumbnails from the preview;
3. the whole job on the fs driver (the original read from the store, the row locked and the variants recorded
   before and after their write, the objects written): `make_variants` as the worker runs it.

Target: the port at least 70% of the bare loop (the job's figure shows what the database and the store add).

    python bench/variants.py [--images 30] [--size 4000x3000]
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import io
import os
import tempfile
import time
import uuid

os.environ.setdefault("VIPS_CONCURRENCY", "1")

from common import ROOT, bench_database, machine

sys.path.insert(0, str(ROOT))


def photos(count: int, width: int, height: int) -> list[bytes]:
    from PIL import Image

    made = []
    for index in range(count):
        image = Image.effect_noise((width, height), 40 + index).convert("RGB")
        out = io.BytesIO()
        image.save(out, "JPEG", quality=88)
        made.append(out.getvalue())
    return made


def bare_loop(data: list[bytes]) -> float:
    import pyvips

    pyvips.cache_set_max(0)
    started = time.perf_counter()
    for image in data:
        for box in (160, 480, 1600):
            pyvips.Image.thumbnail_buffer(image, box, height=box, size="down").write_to_buffer(
                ".webp", keep="none", Q=80, effort=2
            )
    return time.perf_counter() - started


def port(data: list[bytes]) -> float:
    from app.content.imaging import make_variants
    from app.domain.variants import Sizes

    started = time.perf_counter()
    for image in data:
        made = make_variants(image, Sizes(160, 480, 1600), 1 << 30, 1_000_000_000, 120)
        assert isinstance(made, list) and len(made) == 3, made
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=30)
    parser.add_argument("--size", default="4000x3000")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    data = photos(args.images, width, height)
    print(machine())
    print(
        f"{args.images} JPEG photos of {width}x{height}, {sum(map(len, data)) // len(data) // 1024} KiB each; "
        f"VIPS_CONCURRENCY={os.environ['VIPS_CONCURRENCY']}"
    )
    bare_loop(data[:2])  # warm both (libvips loads its modules once)
    port(data[:2])
    rows = []
    for name, run in (
        ("pyvips thumbnail, bare loop", bare_loop),
        ("Lethe imaging port", port),
        ("pyvips thumbnail, bare loop (again)", bare_loop),
    ):
        seconds = run(data)
        rows.append((name, seconds))
        print(f"{name:40s} {args.images / seconds:7.2f} images/s  {3 * args.images / seconds:7.2f} variants/s")
    with bench_database() as database_url:
        seconds = job_loop(data, database_url)
    print(
        f"{'the whole job (fs, database, store)':40s} {args.images / seconds:7.2f} images/s  "
        f"{3 * args.images / seconds:7.2f} variants/s"
    )
    best_bare = min(rows[0][1], rows[2][1])
    print(f"port / bare loop: {best_bare / rows[1][1]:.0%}   job / bare loop: {best_bare / seconds:.0%}")


def job_loop(data: list[bytes], database_url: str) -> float:
    """make_variants as the worker runs it, on fs, for files uploaded through the api's own code."""
    from app.api.app import create_app
    from app.entry.token import mint_token
    from app.entry.wiring import build_runtime
    from app.platform import config
    from workers.actors import ACTORS

    class Jobs:
        def __init__(self) -> None:
            self.messages: list = []

        def enqueue(self, message, *, delay=None):
            self.messages.append(message)
            return message

        def close(self) -> None:
            pass

    root = tempfile.mkdtemp(prefix="lethe-bench-variants-")
    secret = "bench-secret-of-sufficient-length-0123456789"
    cfg = config.load(
        {
            "LETHE_DATABASE_URL": database_url,
            "LETHE_AUTH_JWT_SECRET": secret,
            "LETHE_FILE_FS_ROOT": root,
            "LETHE_FILE_MAX_SIZE": str(1 << 30),
        }
    )
    broker = Jobs()
    rt = build_runtime(cfg, broker, role="api")
    client = create_app(rt).test_client()
    headers = {"Authorization": "Bearer " + mint_token(secret, uuid.uuid4())}
    for image in data:
        created = client.post(
            "/api/v1/uploads",
            headers=headers,
            json={"name": "p.jpg", "size_bytes": len(image), "mime_type": "image/jpeg"},
        ).json
        file_id, part = created["file"]["id"], created["upload"]["part_size"]
        for number, start in enumerate(range(0, len(image), part), start=1):
            client.put(f"/api/v1/uploads/{file_id}/parts/{number}", headers=headers, data=image[start : start + part])
        assert client.post(f"/api/v1/uploads/{file_id}/complete", headers=headers).status_code == 200
    for message in [m for m in broker.messages if m.actor_name == "scan_file"]:
        ACTORS["scan_file"].fn(rt, *message.args)
    jobs = [m for m in broker.messages if m.actor_name == "make_variants"]
    assert len(jobs) == len(data)
    started = time.perf_counter()
    for message in jobs:
        assert ACTORS["make_variants"].fn(rt, *message.args) is None
    seconds = time.perf_counter() - started
    rt.close()
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    return seconds


if __name__ == "__main__":
    main()
