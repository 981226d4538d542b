"""The imaging port: an image's bytes in, its variants out, through libvips (pyvips, with the libvips that
pyvips-binary bundles). Nothing else in the code base decodes an image.

libvips is set up once per process, before the first image: no operation cache (a decoded image never outlives
its job), every loader blocked but those of IMAGE_TYPES, and the loaders libvips itself marks untrusted blocked
too, so SVG, PDF, TIFF, a matrix or a magick file is never parsed whatever its bytes claim. An image is refused
from its header alone when it is too large or over the pixel budget (a decompression bomb declares its size),
a decode is bounded in time (libvips' own progress signal kills a pipeline past the limit), and a truncated or
damaged image is refused rather than padded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from app.domain.variants import BY_NAME, VARIANT_TYPE, Made, Sizes, names_for, refusal_before_decoding

ALLOWED_LOADERS = (
    "VipsForeignLoadJpeg",
    "VipsForeignLoadPng",
    "VipsForeignLoadNsgif",
    "VipsForeignLoadWebp",
    "VipsForeignLoadHeif",
)
_LOAD = "fail_on=truncated"  # a truncated or damaged image is an error, not a grey remainder
_SAVE = {"keep": "none", "Q": 80, "effort": 2}  # no EXIF, XMP, IPTC, ICC or any other metadata block

_setup_lock = threading.Lock()
_vips: Any = None


def _library() -> Any:
    """pyvips, set up once for this process."""
    global _vips
    with _setup_lock:
        if _vips is None:
            import pyvips

            pyvips.cache_set_max(0)
            pyvips.cache_set_max_mem(0)
            pyvips.cache_set_max_files(0)
            pyvips.block_untrusted_set(True)
            pyvips.operation_block_set("VipsForeignLoad", True)
            for loader in ALLOWED_LOADERS:
                pyvips.operation_block_set(loader, False)
            _vips = pyvips
    return _vips


@dataclass(frozen=True)
class Refused:
    """An image that gets no variants, and why (one of app.domain.variants.REFUSALS)."""

    reason: str


class _Deadline:
    """Kills a libvips pipeline once its time is up (libvips checks the kill flag between tiles)."""

    def __init__(self, seconds: float):
        self.ends = time.monotonic() + seconds
        self.expired = False

    def watch(self, image: Any) -> Any:
        """The image, its evaluation watched: killed once the time is up."""
        image.set_progress(True)
        image.signal_connect("eval", lambda img, _progress: self._check(img))
        return image

    def _check(self, image: Any) -> None:
        if time.monotonic() > self.ends:
            self.expired = True
            image.set_kill(True)

    def check(self) -> None:
        """Raise TimeoutError once the time is up (between two steps of the work)."""
        if time.monotonic() > self.ends:
            self.expired = True
            raise TimeoutError


def make_variants(data: bytes, sizes: Sizes, max_size: int, max_pixels: int, timeout_s: float) -> list[Made] | Refused:
    """The variants of one image: the thumbnails fitted into their boxes (every frame of an animation) and, for
    an animation, its first frame as the poster; WebP without metadata, orientation applied, sRGB (an
    image with a colour profile is converted to it first).

    Returns:
        The variants made, or why none are: `too_large`, `too_many_pixels` (read from the header, before any
        pixel is decoded), `undecodable` (no allowed loader reads it, or it is damaged or truncated), `timeout`.
    """
    vips = _library()
    if len(data) > max_size:
        return Refused("too_large")
    try:
        header = vips.Image.new_from_buffer(data, "", access="sequential")
        pages = int(header.get("n-pages")) if "n-pages" in header.get_fields() else 1
        refusal = refusal_before_decoding(len(data), header.width, header.height, max(pages, 1), max_size, max_pixels)
    except vips.Error:
        return Refused("undecodable")
    if refusal is not None:
        return Refused(refusal)
    deadline = _Deadline(timeout_s)
    animated = pages > 1
    # An image with a colour profile (a phone's Display P3) is converted to sRGB before the profile is dropped
    # with the other metadata; one without is sRGB already, and a conversion would cost more than the decode.
    colour = {"export_profile": "srgb"} if "icc-profile-data" in header.get_fields() else {}
    made: list[Made] = []
    wanted = [BY_NAME[name] for name in names_for(pages)]
    moving = [variant for variant in wanted if not variant.first_frame_of_animations]
    try:
        # The last moving variant (the preview) is decoded from the original (shrink-on-load), the ones before it
        # from it, never larger (a thumbnail configured larger than the preview gets the preview's size); a
        # variant of an animation's first frame is decoded from that frame alone.
        largest = sizes.box(moving[-1].name)
        decoded = vips.Image.thumbnail_buffer(
            data,
            largest,
            height=largest,
            size="down",
            **colour,
            option_string=_LOAD + (",n=-1" if animated else ""),
        )
        decoded = deadline.watch(decoded).copy_memory()
        deadline.check()
        for variant in moving:
            box = sizes.box(variant.name)
            image = decoded if variant is moving[-1] else decoded.thumbnail_image(box, height=box, size="down")
            made.append(_saved(deadline.watch(image), variant.name, animated, deadline))
        for variant in (variant for variant in wanted if variant.first_frame_of_animations):
            box = sizes.box(variant.name)
            first = vips.Image.thumbnail_buffer(data, box, height=box, size="down", **colour, option_string=_LOAD)
            made.append(_saved(deadline.watch(first), variant.name, False, deadline))
    except TimeoutError:
        return Refused("timeout")
    except vips.Error:
        return Refused("timeout" if deadline.expired else "undecodable")
    return made


def _saved(image: Any, name: str, animated: bool, deadline: _Deadline) -> Made:
    height = image.get("page-height") if animated and "page-height" in image.get_fields() else image.height
    data = image.write_to_buffer(".webp", **_SAVE)
    deadline.check()
    return Made(name, data, image.width, int(height), VARIANT_TYPE)


def read_back(data: bytes) -> dict[str, Any]:
    """What a variant holds besides its pixels: its metadata fields, size and frames (tests and the audit)."""
    vips = _library()
    image = vips.Image.new_from_buffer(data, "", access="sequential")
    return {
        "fields": list(image.get_fields()),
        "width": image.width,
        "height": image.height,
        "pages": int(image.get("n-pages")) if "n-pages" in image.get_fields() else 1,
    }
