"""Metadata out of an image's bytes without re-encoding it (app/domain/image_metadata.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.image_metadata import filter_exif, strip
from tests.support import images

KINDS = ("jpeg", "png", "webp", "gif")
EXIFTOOL = shutil.which("exiftool") or "exiftool"  # (absent: the tests that need it are skipped)
TAGGED = {kind: images.tagged(kind) for kind in KINDS}  # made once: an ICC profile carries the second it was made


def exiftool(data: bytes) -> dict[str, Any]:
    """Every tag exiftool reads in these bytes (the trusted outside reader GitLab strips with)."""
    shown = subprocess.run([EXIFTOOL, "-j", "-a", "-G1", "-"], input=data, capture_output=True, check=True, timeout=30)
    return json.loads(shown.stdout)[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["location", "all"])
def test_no_location_device_or_text_is_left_and_the_pixels_orientation_and_profile_stay(kind, mode):
    tagged = images.tagged(kind)
    assert len(images.leaked(tagged)) >= 2  # the test image does carry them
    stripped = strip(tagged, f"image/{kind}", mode)
    assert stripped is not None and images.leaked(stripped) == []
    assert images.opened(stripped).tobytes() == images.opened(tagged).tobytes()  # not one pixel re-encoded
    kept = images.metadata_of(stripped)
    if kind != "gif":
        assert kept["icc_profile"] == images.metadata_of(tagged)["icc_profile"]
        assert kept["exif_tags"][0x0112] == 6  # the orientation
        expected = {0x0112} if mode == "all" else {0x010F, 0x0110, 0x0112, 0x8769}
        assert set(kept["exif_tags"]) == expected
        taken = images.opened(stripped).getexif().get_ifd(0x8769)
        assert (taken == {}) if mode == "all" else (taken == {0x9003: "2026:11:30 10:00:00", 0x829A: (1, 250)})
    assert strip(stripped, f"image/{kind}", mode) == stripped  # nothing more to remove


@pytest.mark.skipif(
    shutil.which("exiftool") is None, reason="exiftool is not installed (Debian: libimage-exiftool-perl)"
)
@pytest.mark.parametrize("kind", KINDS)
def test_exiftool_finds_no_position_serial_thumbnail_or_xmp(kind):
    before = exiftool(images.tagged(kind))
    assert any("GPS" in tag or "XMP" in tag for tag in before)  # exiftool sees them in the tagged image
    for mode in ("location", "all"):
        stripped = strip(images.tagged(kind), f"image/{kind}", mode)
        assert stripped is not None
        after = exiftool(stripped)
        named = " ".join(after)
        for gone in (
            "GPS",
            "XMP",
            "MakerNote",
            "SerialNumber",
            "OwnerName",
            "ImageUniqueID",
            "ThumbnailImage",
            "IPTC",
            "Comment",
            "Artist",
            "Trailer",
        ):
            assert gone not in named, (kind, mode, gone, named)
        assert images.CANARY_PLACE.decode() not in json.dumps(after)
        if kind != "gif":
            assert after.get("IFD0:Orientation", "").startswith("Rotate 90"), after


@pytest.mark.parametrize("kind", KINDS)
def test_none_or_another_type_is_left_as_it_is(kind):
    tagged = images.tagged(kind)
    assert strip(tagged, f"image/{kind}", "none") is None
    assert strip(tagged, "image/heic", "location") is None and strip(tagged, None, "all") is None
    assert strip(images.SVG, "image/svg+xml", "all") is None


def test_an_image_with_nothing_to_remove_is_left_as_it_is():
    assert strip(images.one_pixel(), "image/png", "location") == images.one_pixel()
    assert strip(images.animated_gif(), "image/gif", "all") == images.animated_gif()


def test_what_decoders_tolerate_is_stripped_too_and_what_they_cannot_read_is_left_alone():
    """A JPEG cut short (no end marker) or with stray bytes before a marker still shows in a browser: it is
    stripped. A PNG cut short, or with a critical chunk this reader does not know, is left as it is (None), and
    the caller keeps it off inline display."""
    tagged = images.tagged("jpeg")
    sos = tagged.rindex(b"\xff\xda")  # the picture's own scan (the EXIF thumbnail, a JPEG too, comes first)
    cut = tagged[: sos + (tagged.rindex(b"\xff\xd9") - sos) // 2]  # half its scan
    stripped = strip(cut, "image/jpeg", "location")
    assert stripped is not None and images.leaked(stripped) == []
    stray = tagged[:sos] + b"\x00\x17" + tagged[sos:]
    stripped = strip(stray, "image/jpeg", "location")
    assert stripped is not None and images.leaked(stripped) == []
    assert images.opened(stripped).tobytes() == images.opened(tagged).tobytes()
    png = images.tagged("png")
    assert strip(png[: len(png) // 2], "image/png", "location") is None
    at = png.index(b"IDAT") - 4
    foreign = png[:at] + b"\x00\x00\x00\x04CgBI\x00\x00\x00\x00" + b"\x00" * 4 + png[at:]
    assert strip(foreign, "image/png", "location") is None


def test_an_entry_pointing_past_the_exif_is_dropped_and_the_rest_is_still_read():
    tagged = bytearray(images.tagged("jpeg"))
    at = tagged.index(b"Exif\0\0") + 6
    order = "<" if tagged[at : at + 2] == b"II" else ">"
    import struct

    ifd0 = at + struct.unpack_from(order + "I", tagged, at + 4)[0]
    count = struct.unpack_from(order + "H", tagged, ifd0)[0]
    for index in range(count):  # the Artist entry's value now points far past the end
        entry = ifd0 + 2 + 12 * index
        if struct.unpack_from(order + "H", tagged, entry)[0] == 0x013B:
            struct.pack_into(order + "I", tagged, entry + 8, 0x7FFFFFF0)
    stripped = strip(bytes(tagged), "image/jpeg", "location")
    assert stripped is not None and images.leaked(stripped) == []
    assert images.opened(stripped).getexif()[0x0112] == 6


def test_an_animation_keeps_its_frames_and_loop():
    animated = images.animated_gif()
    with_comment = animated[:-1] + b"\x21\xfe\x05hello\x00\x3b"
    stripped = strip(with_comment, "image/gif", "all")
    assert stripped == animated


def test_exif_of_the_other_byte_order_is_kept_in_it():
    tagged = images.tagged("jpeg")
    at = tagged.index(b"Exif\0\0") + 6
    little = filter_exif(tagged[at : tagged.index(b"\xff", at + 100)], "all")
    assert little is not None and little[:2] in (b"II", b"MM")
    big = (
        b"MM\x00*\x00\x00\x00\x08\x00\x02\x01\x12\x00\x03\x00\x00\x00\x01\x00\x03\x00\x00\x88%\x00\x04\x00\x00"
        b"\x00\x01\x00\x00\x00\x26\x00\x00\x00\x00" + b"\x00\x01\x00\x01\x00\x02\x00\x00\x00\x02N\x00\x00\x00\x00\x00"
    )
    assert (
        filter_exif(big, "location") == b"MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01"
        b"\x00\x03\x00\x00\x00\x00\x00\x00"
    )


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), data=st.data())
def test_a_cut_or_changed_image_never_raises(kind, data):
    """Whatever an uploader sends as an image: the bytes stripped, or None (left as they are), never an error."""
    tagged = bytearray(TAGGED[kind])
    cut = data.draw(st.integers(min_value=0, max_value=len(tagged)))
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(min_value=0, max_value=len(tagged) - 1), st.integers(min_value=1, max_value=255)),
            max_size=4,
        )
    )
    for at, value in flips:
        tagged[at] ^= value
    for mode in ("location", "all"):
        result = strip(bytes(tagged[:cut]), f"image/{kind}", mode)
        assert result is None or isinstance(result, bytes)
