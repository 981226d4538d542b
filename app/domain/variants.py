"""Image variants of a file: which files get them, which ones, at what size, and what a refusal says. Pure: no I/O.

A deliverable file whose type, detected from its bytes at completion, is a raster image the imaging port reads
gets `thumb-small`, `thumb-large` and `preview`, each fitted inside a square box of the configured size and
never enlarged; an animation gets `poster` too, its first frame as a still image. Videos get no poster (the
imaging port reads no video). Variants are WebP, written without any metadata, the orientation applied to the
pixels, so that no location or camera detail of the original reaches a reader through them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from app.domain.serving import canonical_type

# The types whose variants are made, and the imaging port's loaders for them (nothing else is ever decoded).
IMAGE_TYPES = frozenset(
    {"image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/heif", "image/avif"}
)
VARIANT_TYPE = "image/webp"


@dataclass(frozen=True)
class Variant:
    """One variant, as data: its name (the key's `v-<name>`, the API's and the database's), the size of `Sizes`
    that sets its box, and how an animation is shown in it: moving (every frame), or its first frame alone, made
    only of an animation (a still image's other variants already show its only frame)."""

    name: str
    box: str  # a field of Sizes: the longest side, in pixels
    first_frame_of_animations: bool = False

    def __str__(self) -> str:
        return self.name


# Every variant, in the order the File document lists them: the moving ones from the smallest to the largest (the
# last is decoded from the original, the others cut from it). A new one is a line here (and its name in the
# database's CHECK of file_variants.name, by a migration).
ALL_VARIANTS = (
    Variant("thumb-small", "thumb_small"),
    Variant("thumb-large", "thumb_large"),
    Variant("preview", "preview"),
    Variant("poster", "preview", first_frame_of_animations=True),
)
BY_NAME = {variant.name: variant for variant in ALL_VARIANTS}
VARIANTS = tuple(variant.name for variant in ALL_VARIANTS)

# Why a file got no variants (recorded, and shown to operators as a count by reason).
REFUSALS = ("too_large", "too_many_pixels", "undecodable", "timeout", "lost")


@dataclass(frozen=True)
class Sizes:
    """The box each variant is fitted into: its longest side in pixels."""

    thumb_small: int
    thumb_large: int
    preview: int

    def box(self, name: str) -> int:
        """The longest side of a variant (the poster has the preview's)."""
        return int(getattr(self, BY_NAME[name].box))


@dataclass(frozen=True)
class Made:
    """One variant as the imaging port wrote it: its bytes and what the File document says of it."""

    name: str
    data: bytes
    width: int
    height: int
    content_type: str = VARIANT_TYPE


def wants_variants(detected_type: str | None) -> bool:
    """Whether a file's detected type is an image the variants are made of."""
    return canonical_type(detected_type) in IMAGE_TYPES


def names_for(pages: int) -> tuple[str, ...]:
    """The variants of an image of `pages` frames: the thumbnails, and a poster for an animation."""
    return tuple(variant.name for variant in ALL_VARIANTS if pages > 1 or not variant.first_frame_of_animations)


def fitted(width: int, height: int, box: int) -> tuple[int, int]:
    """The size of an image of width x height fitted inside a box x box square, never enlarged (at least 1)."""
    if width <= box and height <= box:
        return width, height
    scale = box / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def refusal_before_decoding(
    size_bytes: int, width: int, height: int, pages: int, max_size: int, max_pixels: int
) -> str | None:
    """Why an image is refused from its size and header alone (before a pixel is decoded), or None.

    A decompression bomb declares its size in its header: 100,000 x 100,000 pixels in a few kilobytes is over
    the pixel budget whatever its bytes hold. Every frame of an animation counts.
    """
    if size_bytes > max_size:
        return "too_large"
    if width < 1 or height < 1 or pages < 1:
        return "undecodable"
    if width * height * pages > max_pixels:
        return "too_many_pixels"
    return None


def thumbnails_document(variants: list[dict[str, object]]) -> list[dict[str, object]]:
    """The File document's `thumbnails`: name, width, height and type of each variant ready, in the order of
    the names (no key, no digest, no size of the original)."""
    order = {name: index for index, name in enumerate(VARIANTS)}
    shown = [{"name": v["name"], "width": v["width"], "height": v["height"], "type": v["type"]} for v in variants]
    return sorted(shown, key=lambda v: order.get(str(v["name"]), len(order)))


def pending_action(
    state: str | None, deleted: bool, since: datetime | None, resent_at: datetime | None, now: datetime, ttl: timedelta
) -> str | None:
    """The cleanup's step for variants jobs that never came back: "resend" once past `ttl`, "end" (the file
    gets no variants, reason lost) past `ttl` again after that; None while the job has time, or for a file
    deleted (its purge takes whatever a job wrote) or no longer pending."""
    if state != "pending" or deleted or since is None or since > now - ttl:
        return None
    return "resend" if resent_at is None else "end"
