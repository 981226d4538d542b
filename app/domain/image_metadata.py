"""Metadata out of an image's own bytes, without decoding or re-encoding a pixel. Pure: bytes in, bytes out.

A stored original leaves Lethe through downloads, links and redirects as it was stored, so what could locate or
identify the person who took it goes before the file is deliverable (`image.strip_metadata`):

- `location` (the default): GPS, every XMP packet, IPTC and Photoshop records, maker notes, serial numbers,
  the owner's name, the image's unique id, comments and free text, the EXIF thumbnail (it can carry the unrotated
  original), and anything after the image's end (trailers, extra images of a multi-picture file). EXIF that says
  how the picture was taken (date, camera and lens model, exposure) stays.
- `all`: every piece of metadata but the orientation.

Either way the orientation (EXIF 0x0112) and the colour profile (ICC) stay, and the compressed image data is copied
as it is: the pixels are the ones uploaded. JPEG, PNG (and APNG), WebP and GIF are read segment by segment; a file
of another format, or one these readers cannot follow to its end, is left as it is (`strip` answers None).
"""

from __future__ import annotations

import re
import struct
import zlib
from typing import Literal

Mode = Literal["location", "all", "none"]
MODES: tuple[Mode, ...] = ("location", "all", "none")
STRIPPED_TYPES = ("image/jpeg", "image/png", "image/webp", "image/gif")


class Unreadable(Exception):
    """The bytes do not follow their format to its end: left as they are."""


def strip(data: bytes, content_type: str | None, mode: Mode) -> bytes | None:
    """The image without the metadata `mode` removes (`data` itself when it holds none of it), or None when `mode`
    is none, the type is not one of STRIPPED_TYPES, or the bytes cannot be read to their end: then nobody can say
    what they hold, and they are left as they are."""
    if mode == "none" or content_type not in STRIPPED_TYPES:
        return None
    try:
        stripped = _STRIPPERS[content_type](data, mode)
    except (Unreadable, struct.error, IndexError):
        return None
    return data if stripped == data else stripped


# -- EXIF (a TIFF structure) -------------------------------------------------------------------------------------

ORIENTATION = 0x0112
_EXIF_IFD = 0x8769
# What a picture's EXIF keeps under `location`: how it was taken, never where, by whom or with which unit.
_KEEP_IFD0 = frozenset(
    {
        0x0112,  # Orientation
        0x011A,
        0x011B,
        0x0128,  # XResolution, YResolution, ResolutionUnit
        0x0211,
        0x0212,
        0x0213,  # YCbCrCoefficients, YCbCrSubSampling, YCbCrPositioning
        0x010F,
        0x0110,
        0x0131,
        0x0132,  # Make, Model, Software, DateTime
        0x8298,  # Copyright
    }
)
_KEEP_EXIF = frozenset(
    {
        0x829A,
        0x829D,
        0x8822,
        0x8827,
        0x8830,
        0x8832,  # exposure time, f-number, program, ISO, sensitivity
        0x9000,
        0x9003,
        0x9004,
        0x9010,
        0x9011,
        0x9012,  # version, dates taken and digitised, their offsets
        0x9101,
        0x9102,
        0x9201,
        0x9202,
        0x9203,
        0x9204,
        0x9205,
        0x9207,
        0x9208,
        0x9209,
        0x920A,  # exposure, flash
        0x9290,
        0x9291,
        0x9292,  # sub-second times
        0xA000,
        0xA001,
        0xA002,
        0xA003,  # FlashPix version, colour space, pixel dimensions
        0xA217,
        0xA401,
        0xA402,
        0xA403,
        0xA404,
        0xA405,
        0xA406,
        0xA407,
        0xA408,
        0xA409,
        0xA40A,
        0xA40C,
        0xA432,
        0xA433,
        0xA434,  # lens specification, make and model (never its serial number, 0xA435)
    }
)
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4}
_LONG = 4


def filter_exif(tiff: bytes, mode: Mode) -> bytes | None:
    """A TIFF structure of EXIF (after the `Exif\\0\\0` of a JPEG, the payload of a PNG's eXIf or a WebP's EXIF)
    with only the tags `mode` keeps, in the same byte order; None when none is left."""
    if tiff[:4] == b"II*\x00":
        order = "<"
    elif tiff[:4] == b"MM\x00*":
        order = ">"
    else:
        raise Unreadable()
    ifd0 = _entries(tiff, order, struct.unpack_from(order + "I", tiff, 4)[0])
    keep0 = {ORIENTATION} if mode == "all" else _KEEP_IFD0
    kept0 = [entry for entry in ifd0 if entry[0] in keep0]
    sub: list[tuple[int, int, int, bytes]] = []
    if mode != "all":
        pointer = next((entry for entry in ifd0 if entry[0] == _EXIF_IFD and entry[1] in (_LONG, 13)), None)
        if pointer is not None:
            offset = struct.unpack(order + "I", pointer[3][:4])[0]
            try:
                sub = [entry for entry in _entries(tiff, order, offset) if entry[0] in _KEEP_EXIF]
            except Unreadable:
                sub = []  # an Exif IFD that is not where it is said to be: nothing of it is kept
    if not kept0 and not sub:
        return None
    return _write_tiff(order, kept0, sub)


def _entries(tiff: bytes, order: str, offset: int) -> list[tuple[int, int, int, bytes]]:
    """(tag, type, count, value bytes) of each entry of the IFD at `offset`."""
    if offset < 8 or offset + 2 > len(tiff):
        raise Unreadable()
    (count,) = struct.unpack_from(order + "H", tiff, offset)
    entries = []
    for index in range(count):
        at = offset + 2 + 12 * index
        if at + 12 > len(tiff):
            raise Unreadable()
        tag, kind, number = struct.unpack_from(order + "HHI", tiff, at)
        size = _TYPE_SIZES.get(kind)
        if size is None:
            continue  # a type no reader knows: not kept
        length = size * number
        if length <= 4:
            value = tiff[at + 8 : at + 8 + length]
        else:
            (where,) = struct.unpack_from(order + "I", tiff, at + 8)
            if where + length > len(tiff):
                continue  # a value past the structure's end: nothing to keep of that entry
            value = tiff[where : where + length]
        entries.append((tag, kind, number, value))
    return entries


def _write_tiff(order: str, ifd0: list[tuple[int, int, int, bytes]], sub: list[tuple[int, int, int, bytes]]) -> bytes:
    """A TIFF structure of IFD0 (pointing at an Exif IFD of `sub` when there is one) and no IFD1."""
    if sub:
        ifd0 = [entry for entry in ifd0 if entry[0] != _EXIF_IFD] + [(_EXIF_IFD, _LONG, 1, b"\0\0\0\0")]
    ifd0 = sorted(ifd0)
    sub = sorted(sub)
    out = bytearray(b"II*\x00" if order == "<" else b"MM\x00*") + struct.pack(order + "I", 8)
    first_size = 2 + 12 * len(ifd0) + 4
    second_at = 8 + first_size + _extra_size(ifd0)
    _append_ifd(out, order, ifd0, {_EXIF_IFD: second_at} if sub else {})
    if sub:  # (a table and every value are of an even size: the Exif IFD starts where IFD0 said)
        _append_ifd(out, order, sub, {})
    return bytes(out)


def _extra_size(entries: list[tuple[int, int, int, bytes]]) -> int:
    return sum(len(value) + len(value) % 2 for _, _, _, value in entries if len(value) > 4)


def _append_ifd(
    out: bytearray, order: str, entries: list[tuple[int, int, int, bytes]], pointers: dict[int, int]
) -> None:
    start = len(out)
    extra_at = start + 2 + 12 * len(entries) + 4
    table = bytearray(struct.pack(order + "H", len(entries)))
    values = bytearray()
    for tag, kind, number, value in entries:
        table += struct.pack(order + "HHI", tag, kind, number)
        if tag in pointers:
            table += struct.pack(order + "I", pointers[tag])
        elif len(value) <= 4:
            table += value.ljust(4, b"\0")
        else:
            table += struct.pack(order + "I", extra_at + len(values))
            values += value + (b"\0" if len(value) % 2 else b"")
    table += b"\0\0\0\0"  # no next IFD: the thumbnail's IFD1 is not kept
    out += table + values


# -- JPEG --------------------------------------------------------------------------------------------------------

_EXIF_HEAD = b"Exif\0\0"
_ICC_HEAD = b"ICC_PROFILE\0"
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")  # in entropy-coded data: FF00 is a byte, FFD0-D7 restarts


def _jpeg(data: bytes, mode: Mode) -> bytes:
    if data[:2] != b"\xff\xd8":
        raise Unreadable()
    view = memoryview(data)
    out: list[bytes | memoryview] = [b"\xff\xd8"]  # joined once: the image data is copied a single time
    at = 2
    while True:
        while at + 1 < len(data) and data[at] == 0xFF and data[at + 1] == 0xFF:
            at += 1  # fill bytes before a marker
        if at < len(data) and data[at] != 0xFF:
            # bytes where a marker should be: decoders skip them to the next marker, and so does this copy
            at = data.find(b"\xff", at)
            if at < 0:
                raise Unreadable()
            continue
        if at + 2 > len(data):
            raise Unreadable()
        marker = data[at + 1]
        if marker == 0xD9:  # the end of the image: nothing after it is kept (trailers, extra images)
            out.append(b"\xff\xd9")
            return b"".join(out)
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            out.append(view[at : at + 2])
            at += 2
            continue
        (length,) = struct.unpack_from(">H", data, at + 2)
        end = at + 2 + length
        if length < 2 or end > len(data):
            raise Unreadable()
        if 0xE0 <= marker <= 0xEF or marker == 0xFE:  # application segments and comments: kept, changed or not
            kept = _jpeg_segment(marker, data[at + 4 : end], mode)
            if kept is not None:
                out.append(b"\xff" + bytes([marker]) + struct.pack(">H", len(kept) + 2) + kept)
        else:
            out.append(view[at:end])  # tables, frame and scan headers: as they are
        at = end
        if marker == 0xDA:  # a scan: its entropy-coded data runs to the next marker
            found = _NEXT_MARKER.search(data, at)
            if found is None:  # cut short, no end marker: decoders show what there is, and so it is kept
                out.append(view[at:])
                return b"".join(out)
            out.append(view[at : found.start()])
            at = found.start()


def _jpeg_segment(marker: int, payload: bytes, mode: Mode) -> bytes | None:
    """The payload to keep of an application segment or a comment, or None to drop it."""
    if marker == 0xE0:
        return payload if payload.startswith(b"JFIF\0") else None  # JFXX holds a thumbnail
    if marker == 0xE1:
        if not payload.startswith(_EXIF_HEAD):
            return None  # XMP, extended XMP, anything else
        exif = filter_exif(payload[len(_EXIF_HEAD) :], mode)
        return None if exif is None else _EXIF_HEAD + exif
    if marker == 0xE2:
        return payload if payload.startswith(_ICC_HEAD) else None  # MPF and FlashPix go
    if marker == 0xEE:
        return payload  # Adobe: how the colours are transformed (CMYK, YCCK)
    return None  # APP3..APP13 (IPTC and Photoshop in APP13), APP15, comments


# -- PNG ---------------------------------------------------------------------------------------------------------

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_KEEP = frozenset(
    {
        b"IHDR",
        b"PLTE",
        b"IDAT",
        b"IEND",
        b"tRNS",
        b"gAMA",
        b"cHRM",
        b"sRGB",
        b"iCCP",
        b"sBIT",
        b"bKGD",
        b"pHYs",
        b"acTL",
        b"fcTL",
        b"fdAT",
        b"cICP",
        b"mDCv",
        b"cLLI",
        b"hIST",
        b"sPLT",
    }
)


def _png(data: bytes, mode: Mode) -> bytes:
    if not data.startswith(_PNG_SIGNATURE):
        raise Unreadable()
    out = bytearray(_PNG_SIGNATURE)
    at = len(_PNG_SIGNATURE)
    while True:
        length, kind = struct.unpack_from(">I4s", data, at)
        end = at + 12 + length
        if end > len(data):
            raise Unreadable()
        if kind in _PNG_KEEP:
            out += data[at:end]
        elif kind[0] < 0x61:  # a critical chunk this reader does not know (Apple's CgBI): dropping it would
            raise Unreadable()  # change the image
        elif kind == b"eXIf":
            exif = filter_exif(data[at + 8 : at + 8 + length], mode)
            if exif is not None:
                out += struct.pack(">I4s", len(exif), kind) + exif + struct.pack(">I", zlib.crc32(kind + exif))
        # text (tEXt, zTXt, iTXt: XMP among them), tIME and every other chunk go
        at = end
        if kind == b"IEND":
            return bytes(out)


# -- WebP --------------------------------------------------------------------------------------------------------

_WEBP_KEEP = frozenset({b"VP8 ", b"VP8L", b"VP8X", b"ALPH", b"ANIM", b"ANMF", b"ICCP"})
_VP8X_EXIF, _VP8X_XMP = 0x08, 0x04


def _webp(data: bytes, mode: Mode) -> bytes:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        raise Unreadable()
    (riff_size,) = struct.unpack_from("<I", data, 4)
    end_of_riff = 8 + riff_size
    if end_of_riff > len(data):
        raise Unreadable()
    chunks = bytearray()
    has_exif = False
    at = 12
    while at < end_of_riff:
        kind, size = struct.unpack_from("<4sI", data, at)
        end = at + 8 + size + (size % 2)
        if at + 8 + size > end_of_riff:
            raise Unreadable()
        if kind in _WEBP_KEEP:
            chunks += data[at:end]
        elif kind == b"EXIF":
            payload = data[at + 8 : at + 8 + size]
            if payload.startswith(_EXIF_HEAD):
                payload = payload[len(_EXIF_HEAD) :]
            exif = filter_exif(payload, mode)
            if exif is not None:
                has_exif = True
                chunks += struct.pack("<4sI", kind, len(exif)) + exif + (b"\0" if len(exif) % 2 else b"")
        at = end
    if chunks[:4] == b"VP8X":
        flags = chunks[8] & ~(_VP8X_EXIF | _VP8X_XMP)
        chunks[8] = flags | (_VP8X_EXIF if has_exif else 0)
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + bytes(chunks)


# -- GIF ---------------------------------------------------------------------------------------------------------

_GIF_APPLICATIONS_KEPT = (b"NETSCAPE2.0", b"ANIMEXTS1.0", b"ICCRGBG1012")


def _gif(data: bytes, mode: Mode) -> bytes:
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise Unreadable()
    flags = data[10]
    at = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
    out = bytearray(data[:at])
    while True:
        introducer = data[at]
        if introducer == 0x3B:  # the trailer: nothing after it is kept
            out += b"\x3b"
            return bytes(out)
        if introducer == 0x2C:  # an image: its descriptor, local colour table, then its data
            local = data[at + 9]
            start = at
            at += 10 + (3 * (2 << (local & 7)) if local & 0x80 else 0) + 1
            at = _sub_blocks_end(data, at)
            out += data[start:at]
        elif introducer == 0x21:
            label = data[at + 1]
            start = at
            end = _sub_blocks_end(data, at + 2)
            if label == 0xFF:
                keep = data[at + 2] == 11 and data[at + 3 : at + 14] in _GIF_APPLICATIONS_KEPT
            else:
                keep = label in (0xF9, 0x01)  # graphic control (timing, transparency), plain text; comments go
            if keep:
                out += data[start:end]
            at = end
        else:
            raise Unreadable()


def _sub_blocks_end(data: bytes, at: int) -> int:
    while True:
        size = data[at]
        at += 1 + size
        if size == 0:
            return at
        if at > len(data):
            raise Unreadable()


_STRIPPERS = {"image/jpeg": _jpeg, "image/png": _png, "image/webp": _webp, "image/gif": _gif}
