"""Test images, made by the tests (Pillow): a photo with GPS EXIF and an orientation, a PNG with alpha, an animated
GIF, a one-pixel image, a truncated JPEG, a PNG bomb of 100,000 x 100,000 pixels in a few KB, an SVG."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

from PIL import Image

# The GPS position of the photo: degrees, minutes, seconds of latitude 52 deg 31' 12" N.
GPS_LATITUDE = (52.0, 31.0, 12.0)
SVG = (
    b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><rect width="64" '
    b'height="64" fill="red"/><script>alert(1)</script></svg>'
)


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
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", idat)
        + chunk(b"IEND", b"")
    )


def opened(data: bytes) -> Image.Image:
    """An image read back with Pillow."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def metadata_of(data: bytes) -> dict[str, Any]:
    """Everything Pillow finds besides the pixels: EXIF tags (GPS included), XMP, ICC, comments."""
    image = Image.open(io.BytesIO(data))
    found = {key: value for key, value in image.info.items() if key in ("exif", "xmp", "icc_profile", "comment")}
    exif = image.getexif()
    if len(exif):
        found["exif_tags"] = dict(exif)
    if exif.get_ifd(0x8825):
        found["gps"] = exif.get_ifd(0x8825)
    return found


# -- images that carry every kind of metadata a camera, an editor or a phone writes -------------------------------

CANARY_PLACE = b"Canaryville"  # a place named in XMP, IPTC, a comment and a trailer: no stripped image holds it
CANARY_SERIAL = "SN-CANARY-0042"
XMP = (
    b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
    b'<rdf:Description xmlns:exif="http://ns.adobe.com/exif/1.0/"'
    b' xmlns:photoshop="http://ns.adobe.com/photoshop/1.0/"'
    b' exif:GPSLatitude="52,31.2N" exif:GPSLongitude="13,24.6E" photoshop:City="' + CANARY_PLACE + b'"/>'
    b"</rdf:RDF></x:xmpmeta>"
)


def _exif_with_everything(orientation: int) -> bytes:
    """EXIF (after its `Exif\\0\\0`) with a camera, a date, an orientation, a GPS position, a maker note, serial
    numbers, an owner, and an IFD1 thumbnail (a small JPEG of its own)."""
    exif = Image.Exif()
    exif[0x010F] = "LetheCam"
    exif[0x0110] = "Model 7"
    exif[0x0112] = orientation
    exif[0x013B] = "Alex the photographer"  # Artist
    exif[0x8825] = {1: "N", 2: GPS_LATITUDE, 3: "E", 4: (13.0, 24.0, 36.0)}
    exif[0x8769] = {
        0x9003: "2026:11:30 10:00:00",
        0x829A: (1, 250),
        0x927C: b"MAKERNOTE " + CANARY_PLACE,
        0xA430: "Alex Owner",
        0xA431: CANARY_SERIAL,
        0xA435: "LENS-" + CANARY_SERIAL,
        0xA420: "UNIQUE-ID-0123456789",
    }
    tiff = bytearray(exif.tobytes()[6:])  # after b"Exif\0\0"
    order = "<" if tiff[:2] == b"II" else ">"
    ifd0 = struct.unpack_from(order + "I", tiff, 4)[0]
    count = struct.unpack_from(order + "H", tiff, ifd0)[0]
    next_slot = ifd0 + 2 + 12 * count
    thumb = io.BytesIO()
    Image.new("RGB", (32, 24), (220, 20, 20)).save(thumb, "JPEG")
    ifd1 = len(tiff) + len(tiff) % 2
    tiff += b"\0" * (ifd1 - len(tiff))
    data_at = ifd1 + 2 + 12 * 2 + 4
    tiff += struct.pack(order + "H", 2)
    tiff += struct.pack(order + "HHII", 0x0201, 4, 1, data_at) + struct.pack(
        order + "HHII", 0x0202, 4, 1, len(thumb.getvalue())
    )
    tiff += b"\0\0\0\0" + thumb.getvalue()
    struct.pack_into(order + "I", tiff, next_slot, ifd1)
    return b"Exif\0\0" + bytes(tiff)


def _srgb_profile() -> bytes:
    from PIL import ImageCms

    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def _segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload


def tagged(kind: str, orientation: int = 6) -> bytes:
    """A picture of `kind` (jpeg, png, webp, gif) carrying every kind of metadata its format holds: EXIF with GPS,
    a maker note, serial numbers and (JPEG) a thumbnail; XMP with a position and a city; IPTC (JPEG); comments; an
    ICC profile (not GIF); and bytes past its end naming the place. Its left half is red, its right half blue."""
    image = Image.new("RGB", (96, 64), (220, 20, 20))
    image.paste((20, 20, 220), (48, 0, 96, 64))
    exif = _exif_with_everything(orientation)
    trailer = b"TRAILER " + CANARY_PLACE
    out = io.BytesIO()
    if kind == "jpeg":
        image.save(out, "JPEG", quality=90, icc_profile=_srgb_profile())
        data = out.getvalue()
        extra = (
            _segment(0xE1, exif)
            + _segment(0xE1, b"http://ns.adobe.com/xap/1.0/\0" + XMP)
            + _segment(0xED, b"Photoshop 3.0\08BIM\x04\x04\0\0\0\0\0\x10\x1c\x02\x5a\0\x0b" + CANARY_PLACE)
            + _segment(0xFE, b"taken at " + CANARY_PLACE)
        )
        return data[:2] + extra + data[2:] + trailer
    if kind == "png":
        from PIL import PngImagePlugin

        info = PngImagePlugin.PngInfo()
        info.add_text("Comment", "taken at " + CANARY_PLACE.decode())
        info.add_itxt("XML:com.adobe.xmp", XMP.decode())
        image.save(out, "PNG", pnginfo=info, exif=exif, icc_profile=_srgb_profile())
        return out.getvalue() + trailer
    if kind == "webp":
        image.save(out, "WEBP", lossless=True, exif=exif, xmp=XMP, icc_profile=_srgb_profile())
        return out.getvalue()
    if kind == "gif":
        image.save(out, "GIF", comment=b"taken at " + CANARY_PLACE)
        data = out.getvalue()
        xmp_extension = (
            b"\x21\xff\x0bXMP DataXMP"
            + b"".join(bytes([len(XMP[i : i + 255])]) + XMP[i : i + 255] for i in range(0, len(XMP), 255))
            + b"\0"
        )
        return data[:-1] + xmp_extension + b"\x3b" + trailer
    raise ValueError(kind)


def leaked(data: bytes) -> list[str]:
    """What of the metadata `tagged` writes is still in these bytes (by searching them, and by Pillow)."""
    found = [
        name
        for name, needle in (
            ("place", CANARY_PLACE),
            ("serial", CANARY_SERIAL.encode()),
            ("xmp", b"xmpmeta"),
            ("maker note", b"MAKERNOTE"),
            ("owner", b"Alex"),
            ("unique id", b"UNIQUE-ID"),
        )
        if needle in data
    ]
    exif = Image.open(io.BytesIO(data)).getexif()
    if exif.get_ifd(0x8825):
        found.append("gps")
    if exif.get_ifd(0x8769).get(0x927C):
        found.append("maker note tag")
    return found
