"""The key schema (D4): pure, property-tested."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.keys import (
    VARIANTS,
    KeySchemaError,
    original_key,
    part_key,
    tail_key,
    validate_key,
    validate_segment,
    variant_key,
)


@given(st.uuids(), st.integers(min_value=1, max_value=10_000))
def test_original_keys_validate_and_carry_only_their_file_id(file_id, revision):
    key = original_key(file_id, revision)
    assert validate_key(key) == key
    hex_id = file_id.hex
    assert key == f"f/{hex_id[:2]}/{hex_id[2:4]}/{file_id}/orig-{revision}"
    ids = [segment for segment in key.split("/") if len(segment) == 36]
    assert ids == [str(file_id)]


@given(st.uuids(), st.sampled_from(VARIANTS))
def test_variant_keys(file_id, name):
    key = variant_key(file_id, name)
    assert validate_key(key).endswith(f"/{file_id}/v-{name}")


@given(st.uuids(), st.integers(min_value=1, max_value=10_000))
def test_part_keys(file_id, number):
    assert validate_key(part_key(file_id, number)) == f"uploads/{file_id}/part-{number}"


@given(st.uuids())
def test_tail_keys(file_id):
    # issue 25: a tus upload's tail lives beside its parts, under the upload's own prefix, and carries only
    # its file id, in canonical form whatever the spelling given.
    key = tail_key(str(file_id).upper())
    assert validate_key(key) == f"uploads/{file_id}/tail"
    assert key not in {part_key(file_id, n) for n in range(1, 5)}


@given(st.text())
def test_validate_key_accepts_nothing_with_a_bad_segment(text):
    try:
        validate_key(text)
    except KeySchemaError:
        return
    segments = text.split("/")
    assert text and not text.startswith("/")
    assert all(segment not in ("", ".", "..") for segment in segments)
    assert "\\" not in text and not any(ord(ch) < 32 or ord(ch) == 127 for ch in text)


@pytest.mark.parametrize("bad", ["", "/x", "a//b", "a/", "./a", "a/..", "a\\b", "a\x00"])
def test_bad_keys(bad):
    with pytest.raises(KeySchemaError):
        validate_key(bad)


def test_ids_are_canonical_whatever_their_spelling():
    file_id = uuid.uuid4()
    assert original_key(str(file_id).upper()) == original_key(file_id)


def test_no_name_can_enter_a_key():
    with pytest.raises(KeySchemaError):
        variant_key(uuid.uuid4(), "../../etc")
    with pytest.raises((KeySchemaError, ValueError)):
        original_key("report.pdf")
    with pytest.raises(KeySchemaError):
        validate_segment("a/b")
    with pytest.raises(KeySchemaError):
        original_key(uuid.uuid4(), 0)
