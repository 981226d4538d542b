"""The cost of storing a photo again without its metadata (image.strip_metadata), beside a plain copy. Not a test.

The same phone-like 12 MP JPEGs (`--images`, made here with Pillow: a smooth picture with a little noise, ~4-6
MB at quality 90, with EXIF carrying GPS, a maker note and serial numbers, an XMP packet and an ICC profile), one
thread, modes alternating `--rounds` times in one run:

1. copy in memory: `bytes(bytearray(data))`, the floor of anything that writes the bytes again;
2. strip in memory: app/domain/image_metadata.strip (segments walked, EXIF rewritten, the scan's entropy-coded
   data found by one regular expression and copied);
3. copy through the fs driver: the original read from the store and written back under another key (what storing
   the file again costs without stripping it);
4. strip through the fs driver: the same read and write with the strip between (app/content/strip.py's work
   on the store, without its two short transactions).

Target: the strip within 2x of the copy, per 12 MP JPEG, in memory and through the store.

    python bench/strip.py [--images 6] [--rounds 3] [--size 4000x3000]
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import io
import statistics
import tempfile
import time

from common import ROOT, machine

sys.path.insert(0, str(ROOT))


def photos(count: int, width: int, height: int) -> list[bytes]:
    from PIL import Image, ImageFilter

    from tests.support.images import XMP, _exif_with_everything, _segment, _srgb_profile

    made = []
    for index in range(count):
        smooth = (
            Image.effect_noise((width // 16, height // 16), 60 + index)
            .convert("RGB")
            .resize((width, height), Image.BICUBIC)
            .filter(ImageFilter.GaussianBlur(2))
        )
        grain = Image.effect_noise((width, height), 12).convert("RGB")
        picture = Image.blend(smooth, grain, 0.3)
        out = io.BytesIO()
        picture.save(out, "JPEG", quality=90, icc_profile=_srgb_profile())
        data = out.getvalue()
        made.append(
            data[:2]
            + _segment(0xE1, _exif_with_everything(6))
            + _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\0" + XMP)
            + data[2:]
        )
    return made


def in_memory(data: list[bytes], strip_it: bool) -> float:
    from app.domain.image_metadata import strip

    started = time.perf_counter()
    for image in data:
        out = strip(image, "image/jpeg", "location") if strip_it else bytes(bytearray(image))
        assert out is not None
    return (time.perf_counter() - started) / len(data)


def through_store(store, keys: list[str], strip_it: bool) -> float:
    from app.domain.image_metadata import strip

    started = time.perf_counter()
    for key in keys:
        image = b"".join(store.open(key))
        out = strip(image, "image/jpeg", "location") if strip_it else image
        assert out is not None
        store.put(key + "-again", out, len(out))
    return (time.perf_counter() - started) / len(keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="4000x3000")
    args = parser.parse_args()
    width, height = (int(side) for side in args.size.split("x"))
    data = photos(args.images, width, height)
    from app.domain.image_metadata import strip
    from app.storage.fs import FsStore

    removed = [len(image) - len(strip(image, "image/jpeg", "location") or image) for image in data]
    print(f"# {machine()}")
    print(
        f"# {args.images} JPEGs of {width}x{height}, {statistics.mean(len(d) for d in data) / 2**20:.1f} MiB on "
        f"average; {statistics.mean(removed) / 1024:.1f} KiB of metadata removed from each"
    )
    with tempfile.TemporaryDirectory() as workdir:
        store = FsStore(workdir)
        keys = []
        for index, image in enumerate(data):
            key = f"f/00/00/00000000-0000-4000-8000-{index:012d}/orig-1"
            store.put(key, image, len(image))
            keys.append(key)
        figures: dict[str, list[float]] = {
            "copy in memory": [],
            "strip in memory": [],
            "copy through fs": [],
            "strip through fs": [],
        }
        for _ in range(args.rounds):
            figures["copy in memory"].append(in_memory(data, False))
            figures["strip in memory"].append(in_memory(data, True))
            figures["copy through fs"].append(through_store(store, keys, False))
            figures["strip through fs"].append(through_store(store, keys, True))
    best = {name: min(values) for name, values in figures.items()}
    for name, value in best.items():
        print(
            f"{name:18} {value * 1000:8.2f} ms per photo (best of {args.rounds}; all: "
            f"{', '.join(f'{v * 1000:.2f}' for v in figures[name])})"
        )
    print(f"strip / copy in memory:    {best['strip in memory'] / best['copy in memory']:.2f}x (target <= 2x)")
    print(f"strip / copy through fs:   {best['strip through fs'] / best['copy through fs']:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
