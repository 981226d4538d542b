"""Serving rules (app/domain/serving.py) and sealed links (app/platform/links.py): ranges, validators,
conditional answers, inline display, and tokens that bind their facts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.serving import (
    UNSATISFIABLE,
    ByteRange,
    Conditions,
    Validators,
    entity_tag,
    http_date,
    inline_type,
    precondition,
    requested_range,
)
from app.platform.links import BadLink, Link, Sealer

MODIFIED = datetime(2026, 11, 30, 12, 0, 0, 500_000, tzinfo=UTC)
TAG = entity_tag(uuid.UUID(int=7), "f/00/00/x/orig-1")
VALIDATORS = Validators(TAG, MODIFIED)


@given(header=st.text(max_size=40), size=st.integers(min_value=0, max_value=10**12))
def test_any_range_header_answers_within_the_file_or_whole_or_416(header, size):
    answer = requested_range(Conditions(range=header), VALIDATORS, size)
    if isinstance(answer, ByteRange):
        assert 0 <= answer.first <= answer.last < size and answer.length >= 1
    else:
        assert answer in (None, UNSATISFIABLE)


@given(
    first=st.integers(min_value=0, max_value=10**6),
    length=st.integers(min_value=1, max_value=10**6),
    size=st.integers(min_value=1, max_value=10**6),
)
def test_a_range_is_the_bytes_it_names_cut_to_the_file(first, length, size):
    answer = requested_range(Conditions(range=f"bytes={first}-{first + length - 1}"), VALIDATORS, size)
    if first >= size:
        assert answer == UNSATISFIABLE
    else:
        assert answer == ByteRange(first, min(first + length - 1, size - 1), size)


def test_suffix_and_open_ranges_and_an_empty_file():
    assert requested_range(Conditions(range="bytes=-3"), VALIDATORS, 10) == ByteRange(7, 9, 10)
    assert requested_range(Conditions(range="bytes=4-"), VALIDATORS, 10) == ByteRange(4, 9, 10)
    assert requested_range(Conditions(range="bytes=-0"), VALIDATORS, 10) == UNSATISFIABLE
    assert requested_range(Conditions(range="bytes=0-"), VALIDATORS, 0) == UNSATISFIABLE
    assert requested_range(Conditions(range="bytes=0-1, 3-4"), VALIDATORS, 10) is None


def test_if_range_serves_the_range_only_for_the_same_object():
    ranged = Conditions(range="bytes=0-1", if_range=TAG)
    assert requested_range(ranged, VALIDATORS, 10) == ByteRange(0, 1, 10)
    assert requested_range(Conditions(range="bytes=0-1", if_range='"other"'), VALIDATORS, 10) is None
    assert requested_range(Conditions(range="bytes=0-1", if_range="W/" + TAG), VALIDATORS, 10) is None  # weak
    assert requested_range(Conditions(range="bytes=0-1", if_range=http_date(MODIFIED)), VALIDATORS, 10) == ByteRange(
        0, 1, 10
    )
    earlier = http_date(MODIFIED - timedelta(seconds=1))
    assert requested_range(Conditions(range="bytes=0-1", if_range=earlier), VALIDATORS, 10) is None


def test_preconditions_in_the_order_rfc_9110_gives():
    assert precondition(Conditions(if_none_match=TAG), VALIDATORS) == 304
    assert precondition(Conditions(if_none_match="*"), VALIDATORS) == 304
    assert precondition(Conditions(if_none_match='"a", ' + TAG), VALIDATORS) == 304
    assert precondition(Conditions(if_none_match='"a"'), VALIDATORS) is None
    assert precondition(Conditions(if_modified_since=http_date(MODIFIED)), VALIDATORS) == 304
    assert precondition(Conditions(if_modified_since=http_date(MODIFIED - timedelta(days=1))), VALIDATORS) is None
    # If-None-Match wins over If-Modified-Since
    assert precondition(Conditions(if_none_match='"a"', if_modified_since=http_date(MODIFIED)), VALIDATORS) is None
    assert precondition(Conditions(if_match='"a"'), VALIDATORS) == 412
    assert precondition(Conditions(if_match="W/" + TAG), VALIDATORS) == 412  # a strong comparison
    assert precondition(Conditions(if_unmodified_since=http_date(MODIFIED - timedelta(days=1))), VALIDATORS) == 412
    assert precondition(Conditions(if_modified_since="not a date"), VALIDATORS) is None


def test_the_tag_names_the_object_not_its_content():
    file_id = uuid.uuid4()
    assert entity_tag(file_id, "k/orig-1") == entity_tag(file_id, "k/orig-1")
    assert entity_tag(file_id, "k/orig-1") != entity_tag(file_id, "k/orig-2")
    assert entity_tag(file_id, "k/orig-1") != entity_tag(file_id, "k/orig-1", "thumb")
    assert entity_tag(file_id, "k/orig-1") != entity_tag(uuid.uuid4(), "k/orig-1")


@pytest.mark.parametrize(
    "declared, detected, shown",
    [
        ("image/png", "image/png", "image/png"),
        ("image/jpg", "image/jpeg", "image/jpeg"),  # an alias of the same type
        ("IMAGE/PNG; charset=x", "image/png", "image/png"),
        ("video/mp4", "video/mp4", "video/mp4"),
        ("image/png", "text/html", None),
        ("text/html", "text/html", None),
        ("image/svg+xml", "image/svg+xml", None),
        ("application/pdf", "application/pdf", None),
        ("image/png", None, None),
        ("image/jpeg", "image/png", None),
    ],
)
def test_inline_only_for_a_listed_type_declared_and_detected_alike(declared, detected, shown):
    assert inline_type(declared, detected) == shown


SEALER = Sealer("a" * 40)
LINK = Link(uuid.uuid4(), "inline", datetime(2026, 12, 1, 12, 0, tzinfo=UTC), None)


def test_a_link_opens_to_what_was_sealed_and_hides_it():
    token = SEALER.seal(LINK)
    assert SEALER.open(token) == LINK
    assert str(LINK.file_id) not in token and LINK.file_id.hex not in token
    with_variant = Link(LINK.file_id, "attachment", LINK.expires_at, "thumb")
    assert SEALER.open(SEALER.seal(with_variant)) == with_variant
    assert SEALER.seal(LINK) != token  # a fresh nonce each time


@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_a_link_changed_anywhere_or_sealed_elsewhere_is_refused(position, flip):
    import base64

    token = SEALER.seal(LINK)
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[position % len(raw)] ^= flip
    with pytest.raises(BadLink):
        SEALER.open(base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode())
    with pytest.raises(BadLink):
        Sealer("b" * 40).open(token)


@given(st.text(max_size=120))
def test_no_text_made_up_opens_as_a_link(text):
    with pytest.raises(BadLink):
        SEALER.open(text)


TOKEN = SEALER.seal(LINK)


@given(data=st.data())
def test_a_link_has_one_spelling(data):
    """Any other spelling of a sealed token (a character outside the alphabet inserted, padding appended, the
    standard alphabet's +/ for -_, other unused bits in the last character) is refused: a cache, a log or a deny
    list keyed on the URL sees one URL for one link."""
    token = TOKEN
    at = data.draw(st.integers(min_value=0, max_value=len(token)))
    inserted = data.draw(st.sampled_from(["=", "==", ".", "!", "*", "~", "%20", " ", "\n", "+", "/"]))
    with pytest.raises(BadLink):
        SEALER.open(token[:at] + inserted + token[at:])
    standard = token.replace("-", "+").replace("_", "/")
    if standard != token:
        with pytest.raises(BadLink):
            SEALER.open(standard)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = data.draw(st.sampled_from(alphabet))
    other = token[:-1] + last
    if other != token:
        with pytest.raises(BadLink):
            SEALER.open(other)
