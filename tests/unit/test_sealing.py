"""Sealed objects: where the segments lie (app/domain/sealing.py) and the codec that seals and opens them
(app/storage/codec.py): every range opens to the plaintext from the segments it touches alone, and no altered,
moved, cut or foreign byte ever comes out as plaintext."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Generator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import sealing
from app.domain.sealing import HEADER_BYTES, SEGMENT_BYTES, TAG_BYTES, reads_for, sealed_object_size, sealed_size
from app.errors import ContentCorrupt
from app.storage.codec import ORIGINAL, Sealed, tail_role, variant_role

SEG = SEGMENT_BYTES
FILE = uuid.UUID("3f2b1c4d-0000-4000-8000-00000000a1e5")


def sealed_original(key: Sealed, data: bytes, piece_size: int) -> bytes:
    """What the store holds of an original uploaded in parts of `piece_size`: each part sealed alone, then the
    parts concatenated (as fs and S3 assemble them)."""
    pieces = [data[start : start + piece_size] for start in range(0, max(len(data), 1), piece_size)]
    return b"".join(key.seal_bytes(ORIGINAL, number, piece) for number, piece in enumerate(pieces, start=1))


class Recording:
    """A store of one object that records the byte ranges a read asks for."""

    def __init__(self, blob: bytes):
        self.blob = blob
        self.asked: list[tuple[int, int]] = []

    def __call__(self, first: int, length: int):
        self.asked.append((first, length))
        part = self.blob[first : first + length]
        return iter([part[i : i + 7000] for i in range(0, len(part), 7000)] or [b""])


def test_sizes_follow_the_segments():
    assert sealing.segments_of(0) == 1 and sealing.segments_of(1) == 1
    assert sealing.segments_of(SEG) == 1 and sealing.segments_of(SEG + 1) == 2
    assert sealed_size(0) == HEADER_BYTES + TAG_BYTES
    assert sealed_size(SEG + 1) == HEADER_BYTES + SEG + 1 + 2 * TAG_BYTES
    assert sealed_object_size(10, 4) == 2 * sealed_size(4) + sealed_size(2)


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(0, 5 * SEG + 17),
    piece=st.sampled_from([1, 1000, SEG, SEG + 3, 2 * SEG, 3 * SEG - 1]),
    data=st.data(),
)
def test_the_reads_of_a_range_cover_it_exactly(size, piece, data):
    first = data.draw(st.integers(0, size))
    length = data.draw(st.integers(0, size - first))
    reads = reads_for(size, piece, first, length)
    assert sum(read.take for read in reads) == length
    covered = []
    for read in reads:
        start = read.index * piece + read.first_segment * SEG + read.skip
        covered.append((start, start + read.take))
        assert read.segments_end <= sealed_object_size(size, piece)
        assert 0 <= read.first_segment <= read.last_segment <= read.final_segment
        # only the segments that hold the range, never one more
        assert read.first_segment == (start - read.index * piece) // SEG
        assert read.last_segment == (start - read.index * piece + read.take - 1) // SEG
    assert covered == sorted(covered)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    if reads:
        assert covered[0][0] == first and covered[-1][1] == first + length


def test_a_range_outside_the_object_is_refused():
    with pytest.raises(ValueError):
        reads_for(10, 4, 8, 3)
    with pytest.raises(ValueError):
        reads_for(10, 4, -1, 2)


@settings(max_examples=120, deadline=None)
@given(size=st.integers(0, 4 * SEG + 100), piece=st.sampled_from([SEG, SEG + 5000, 2 * SEG]), data=st.data())
def test_every_range_opens_to_the_plaintext_from_the_segments_it_touches(size, piece, data):
    plaintext = os.urandom(size)
    key = Sealed(FILE, os.urandom(32), piece)
    store = Recording(sealed_original(key, plaintext, piece))
    assert len(store.blob) == sealed_object_size(size, piece)
    first = data.draw(st.integers(0, size))
    length = data.draw(st.integers(0, size - first))
    assert b"".join(key.open(store, ORIGINAL, size, first, length, piece)) == plaintext[first : first + length]
    touched = sum(count for _, count in store.asked)
    segments = sum(read.last_segment - read.first_segment + 1 for read in reads_for(size, piece, first, length))
    # what was read is the segments needed (and, for a read near its piece's start, the gap since the header)
    assert touched <= segments * (SEG + TAG_BYTES) + len(reads_for(size, piece, first, length)) * (
        HEADER_BYTES + 256 * 1024
    )
    assert b"".join(key.open_whole(store, ORIGINAL, size, piece)) == plaintext


def test_a_far_range_reads_the_header_and_its_segment_alone():
    size, piece = 20 * SEG, 20 * SEG
    key = Sealed(FILE, os.urandom(32), piece)
    plaintext = os.urandom(size)
    store = Recording(sealed_original(key, plaintext, piece))
    assert (
        b"".join(key.open(store, ORIGINAL, size, 15 * SEG + 10, 20, piece)) == plaintext[15 * SEG + 10 : 15 * SEG + 30]
    )
    assert store.asked == [(0, HEADER_BYTES), (HEADER_BYTES + 15 * (SEG + TAG_BYTES), SEG + TAG_BYTES)]


def test_sealing_streams_and_matches_the_layout():
    key = Sealed(FILE, os.urandom(32), 3 * SEG)
    chunks = [os.urandom(n) for n in (1, SEG - 1, SEG, 5, 2 * SEG)]
    out = list(key.seal(ORIGINAL, 1, iter(chunks)))
    assert len(b"".join(out)) == sealed_size(sum(map(len, chunks)))
    assert len(out) > 2  # handed on as the chunks came, never held whole


def test_a_piece_sealed_twice_never_repeats_its_ciphertext():
    key = Sealed(FILE, os.urandom(32), SEG)
    data = b"same part written again" * 100
    first, second = key.seal_bytes(ORIGINAL, 1, data), key.seal_bytes(ORIGINAL, 1, data)
    assert first[HEADER_BYTES:] != second[HEADER_BYTES:]  # a fresh salt: no nonce is used twice under one key


def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x01]) + blob[at + 1 :]


@settings(max_examples=150, deadline=None)
@given(at=st.integers(0, 2 * (HEADER_BYTES + 2 * SEG + 3 * TAG_BYTES) - 1))
def test_any_altered_byte_answers_an_error_never_altered_plaintext(at):
    size, piece = 4 * SEG + 7, 2 * SEG
    key = Sealed(FILE, b"k" * 32, piece)
    plaintext = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    blob = sealed_original(key, plaintext, piece)
    tampered = Recording(_flip(blob, at % len(blob)))
    out = bytearray()
    with pytest.raises(ContentCorrupt):
        for chunk in key.open(tampered, ORIGINAL, size, 0, None, piece):
            out += chunk
    assert plaintext.startswith(bytes(out))  # what came out before the error is the plaintext, never altered


def test_cut_moved_and_foreign_objects_do_not_open():
    size, piece = 3 * SEG, SEG
    key = Sealed(FILE, os.urandom(32), piece)
    plaintext = os.urandom(size)
    blob = sealed_original(key, plaintext, piece)
    one = sealed_size(SEG)
    cut = blob[:-TAG_BYTES]
    swapped = blob[one : 2 * one] + blob[:one] + blob[2 * one :]
    other_file = sealed_original(Sealed(uuid.uuid4(), key._data_key, piece), plaintext, piece)
    other_key = sealed_original(Sealed(FILE, os.urandom(32), piece), plaintext, piece)
    # a whole piece dropped from the end, with the last piece's final segment gone: the object is short
    dropped = blob[: 2 * one]
    for bad in (cut, swapped, other_file, other_key, dropped):
        with pytest.raises(ContentCorrupt):
            b"".join(key.open_whole(Recording(bad), ORIGINAL, size, piece))
    # a piece's final segment cut off at a segment boundary is found by the missing final flag
    single = key.seal_bytes(ORIGINAL, 1, os.urandom(2 * SEG))
    truncated = single[: HEADER_BYTES + SEG + TAG_BYTES] + single[HEADER_BYTES : HEADER_BYTES + SEG + TAG_BYTES]
    with pytest.raises(ContentCorrupt):
        b"".join(key.open_whole(Recording(truncated), ORIGINAL, 2 * SEG, 2 * SEG))


def test_roles_keep_pieces_apart():
    key = Sealed(FILE, os.urandom(32), SEG)
    variant = key.seal_bytes(variant_role("thumb-small"), 1, b"webp bytes")
    with pytest.raises(ContentCorrupt):
        b"".join(key.open(Recording(variant), variant_role("preview"), 10))
    with pytest.raises(ContentCorrupt):
        b"".join(key.open(Recording(variant), ORIGINAL, 10))
    tail = key.seal_bytes(tail_role(3), 1, b"tail bytes")
    assert b"".join(key.open(Recording(tail), tail_role(3), 10)) == b"tail bytes"
    with pytest.raises(ContentCorrupt):
        b"".join(key.open(Recording(tail), tail_role(4), 10))


def test_an_empty_file_proves_its_end():
    key = Sealed(FILE, os.urandom(32), SEG)
    blob = key.seal_bytes(ORIGINAL, 1, b"")
    assert len(blob) == HEADER_BYTES + TAG_BYTES
    assert b"".join(key.open_whole(Recording(blob), ORIGINAL, 0, SEG)) == b""
    with pytest.raises(ContentCorrupt):
        b"".join(key.open_whole(Recording(blob[:-1]), ORIGINAL, 0, SEG))
    assert list(key.open(Recording(blob), ORIGINAL, 0, 0, None, SEG)) == []


def test_the_key_never_shows():
    key = Sealed(FILE, b"\x07" * 32, SEG)
    assert "\\x07" not in repr(key) and "07070707" not in repr(key)


def test_a_read_through_several_pieces_is_one_fetch():
    size, piece = 5 * SEG + 3, SEG + 100
    key = Sealed(FILE, os.urandom(32), piece)
    plaintext = os.urandom(size)
    store = Recording(sealed_original(key, plaintext, piece))
    assert b"".join(key.open(store, ORIGINAL, size, 0, None, piece)) == plaintext
    assert store.asked == [(0, len(store.blob))]  # a whole download is one GET, not one per part
    store.asked.clear()
    assert b"".join(key.open(store, ORIGINAL, size, 10, 3 * piece, piece)) == plaintext[10 : 10 + 3 * piece]
    assert len(store.asked) == 1


def test_reads_that_reuse_buffers_hand_on_only_their_own_bytes():
    from app.storage import codec

    piece = 3 * SEG + 5
    files = []
    for size in (2 * 1024 * 1024 + 17, 1024 * 1024 + 3 * SEG, SEG + 1):
        key = Sealed(uuid.uuid4(), os.urandom(32), piece)
        plaintext = os.urandom(size)
        files.append((key, plaintext, Recording(sealed_original(key, plaintext, piece))))
    for _ in range(3):
        for key, plaintext, store in files:
            size = len(plaintext)
            assert b"".join(key.open(store, ORIGINAL, size, 0, None, piece)) == plaintext
            assert (
                b"".join(key.open(store, ORIGINAL, size, 7, min(size - 7, 1024 * 1024), piece))
                == plaintext[7 : 7 + min(size - 7, 1024 * 1024)]
            )
            abandoned = key.open(store, ORIGINAL, size, 0, None, piece)
            next(abandoned)
            assert isinstance(abandoned, Generator)
            abandoned.close()  # a reader gone half-way gives its buffer back too
    assert 0 < len(codec._POOL) <= codec._POOL_MAX
    # a segment that does not open ends the read, and its buffer goes back as well
    key, plaintext, store = files[0]
    store.blob = (
        store.blob[: HEADER_BYTES + 5] + bytes([store.blob[HEADER_BYTES + 5] ^ 1]) + store.blob[HEADER_BYTES + 6 :]
    )
    pooled = len(codec._POOL)
    with pytest.raises(ContentCorrupt):
        b"".join(key.open(store, ORIGINAL, len(plaintext), 0, None, piece))
    assert len(codec._POOL) == pooled


@given(size=st.integers(min_value=0, max_value=64 * 2**20), piece=st.integers(min_value=1, max_value=6 * 2**20))
def test_the_plaintext_size_of_a_sealed_object_is_read_back_from_its_stored_size(size, piece):
    from app.domain.sealing import plain_size_of, sealed_object_size

    stored = sealed_object_size(size, piece)
    assert plain_size_of(stored, piece) == size
    assert plain_size_of(stored - 1, piece) != size  # cut short: another size, or none


def test_a_stored_size_no_plaintext_seals_to_has_no_plaintext_size():
    from app.domain.sealing import HEADER_BYTES, plain_size_of

    assert plain_size_of(0, 1024) is None
    assert plain_size_of(HEADER_BYTES + 3, 1024) is None  # shorter than a header and a tag
