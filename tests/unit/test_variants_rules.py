"""The rules of image variants (app/domain/variants.py): which files get them, their sizes, what is refused from
a header alone, and what the cleanup does with a job that never came back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.domain.variants import (
    Sizes,
    fitted,
    names_for,
    pending_action,
    refusal_before_decoding,
    thumbnails_document,
    wants_variants,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TTL = timedelta(hours=1)


def test_only_raster_images_the_port_reads_get_variants():
    for kind in ("image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/avif", "IMAGE/JPG"):
        assert wants_variants(kind), kind
    for other in ("image/svg+xml", "image/tiff", "application/pdf", "video/mp4", "text/html", None, ""):
        assert not wants_variants(other), other


@given(st.integers(1, 200_000), st.integers(1, 200_000), st.integers(1, 5000))
def test_fitted_stays_in_its_box_keeps_the_shape_and_never_enlarges(width, height, box):
    w, h = fitted(width, height, box)
    assert 1 <= w <= width and 1 <= h <= height
    if width <= box and height <= box:
        assert (w, h) == (width, height)
    else:
        assert max(w, h) == box
        # the shape is kept to within the rounding of the shorter side
        scale = box / max(width, height)
        assert abs(w - width * scale) <= 1 and abs(h - height * scale) <= 1


def test_an_animation_gets_a_poster_a_still_does_not():
    assert names_for(1) == ("thumb-small", "thumb-large", "preview")
    assert names_for(2) == ("thumb-small", "thumb-large", "preview", "poster")
    assert Sizes(160, 480, 1600).box("poster") == 1600 and Sizes(160, 480, 1600).box("thumb-small") == 160


def test_a_bomb_is_refused_from_its_header_every_frame_counted():
    budget = 90_000_000
    assert refusal_before_decoding(3_000, 100_000, 100_000, 1, 50 << 20, budget) == "too_many_pixels"
    assert refusal_before_decoding(3_000, 3_000, 3_000, 11, 50 << 20, budget) == "too_many_pixels"
    assert refusal_before_decoding(3_000, 3_000, 3_000, 10, 50 << 20, budget) is None
    assert refusal_before_decoding(51 << 20, 10, 10, 1, 50 << 20, budget) == "too_large"
    assert refusal_before_decoding(10, 0, 10, 1, 50 << 20, budget) == "undecodable"


def test_a_lost_job_is_sent_again_once_then_ended():
    old = NOW - TTL - timedelta(seconds=1)
    assert pending_action("pending", False, NOW - timedelta(minutes=5), None, NOW, TTL) is None
    assert pending_action("pending", False, old, None, NOW, TTL) == "resend"
    assert pending_action("pending", False, old, old, NOW, TTL) == "end"
    assert pending_action("pending", True, old, None, NOW, TTL) is None  # its purge takes what it wrote
    for state in ("ready", "refused", None):
        assert pending_action(state, False, old, None, NOW, TTL) is None


def test_the_document_names_size_and_type_only_in_a_fixed_order():
    rows = [
        {"name": "preview", "width": 3, "height": 4, "type": "image/webp", "size_bytes": 9},
        {"name": "thumb-small", "width": 1, "height": 2, "type": "image/webp"},
    ]
    assert thumbnails_document(rows) == [
        {"name": "thumb-small", "width": 1, "height": 2, "type": "image/webp"},
        {"name": "preview", "width": 3, "height": 4, "type": "image/webp"},
    ]


def test_every_variant_is_one_description_the_names_and_boxes_come_from():
    """A variant is data: its name, the size that sets its box, and whether it is an animation's first frame. The
    key schema, the API's enum, the document's order and the boxes all read the one tuple."""
    from app.domain import keys
    from app.domain.variants import ALL_VARIANTS, VARIANTS, Sizes, names_for

    assert VARIANTS == tuple(variant.name for variant in ALL_VARIANTS) == keys.VARIANTS
    assert [str(variant) for variant in ALL_VARIANTS] == list(VARIANTS)
    sizes = Sizes(thumb_small=10, thumb_large=20, preview=30)
    assert [sizes.box(name) for name in VARIANTS] == [10, 20, 30, 30]
    assert names_for(1) == ("thumb-small", "thumb-large", "preview")
    assert names_for(3) == VARIANTS
    for variant in ALL_VARIANTS:
        assert keys.variant_key("0a1b2c3d-0000-4000-8000-000000000001", variant.name).endswith(f"/v-{variant}")
