"""Test images, made by the tests (Pillow): a photo with GPS EXIF and an orientation, a PNG with alpha, an animated
GIF, a one-pixel image, a truncated JPEG, a PNG bomb of 100,000 x 100,000 pixels in a few KB, an SVG."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

# The GPS position of the photo: degrees, minutes, seconds of latitude 52 deg 31' 12" N.
GPS_LATITUDE = (52.0, 31.0, 12.0)
SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><rect width="64" ' \
      b'height="64" fill="red"/><script>alert(1)</script></svg>'


def photo(width: int = 600, height: int = 400, orientation: int = 6) -> bytes:
    """A JPEG as a phone writes it: EXIF with the camera, a GPS position and an orientation (6: the pixels are to
    be turned 90 degrees clockwise to be seen upright), so the stored pixels are width x height and the shown
    image height x width. Its left half is red and its right half blue, so a turn can be seen."""
    image = Image.new("RGB", (width, height), (220, 20, 20))
    image.paste((20, 20, 220), (width // 2, 0, width, height))
    exif = Image.Exif()
    exif[0x010F] = "LetheCam"  # Make
    exif[0x0110] = "Model 7"  # Model
    exif[0x0112] = orientation
    exif[0x8825] = {1: "N", 2: GPS_LATITUDE, 3: "E", 4: (13.0, 24.0, 36.0)}
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, exif=exif.tobytes())
    return out.getvalue()


def png_with_alpha(width: int = 300, height: int = 200) -> bytes:
    image = Image.new("RGBA", (width, height), (0, 128, 0, 0))
    image.paste((0, 128, 0, 255), (0, 0, width // 2, height))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def animated_gif(frames: int = 4, width: int = 200, height: int = 120) -> bytes:
    pictures = [Image.new("RGB", (width, height), (60 * i, 30, 200 - 40 * i)) for i in range(frames)]
    out = io.BytesIO()
    pictures[0].save(out, "GIF", save_all=True, append_images=pictures[1:], duration=80, loop=0)
    return out.getvalue()


def one_pixel() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (1, 1), (1, 2, 3)).save(out, "PNG")
    return out.getvalue()


def truncated_jpeg() -> bytes:
    out = io.BytesIO()
    Image.effect_noise((640, 480), 64).convert("RGB").save(out, "JPEG", quality=95)
    data = out.getvalue()
    return data[: len(data) // 3]


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG that declares width x height 1-bit pixels and carries a few rows of them: a few KB that would be
    10 gigapixels decoded."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = b"".join(compressor.compress(row) for _ in range(64)) + compressor.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def opened(data: bytes) -> Image.Image:
    """An image read back with Pillow."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def metadata_of(data: bytes) -> dict:
    """Everything Pillow finds besides the pixels: EXIF tags (GPS included), XMP, ICC, comments."""
    image = Image.open(io.BytesIO(data))
    found = {key: value for key, value in image.info.items() if key in ("exif", "xmp", "icc_profile", "comment")}
    exif = image.getexif()
    if len(exif):
        found["exif_tags"] = dict(exif)
    if exif.get_ifd(0x8825):
        found["gps"] = exif.get_ifd(0x8825)
    return found
