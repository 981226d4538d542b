"""Where the bytes of a sealed object lie. Pure: no I/O, no cryptography.

A sealed object is one or more *pieces*, one after another. A piece is what one write seals: a header (the
format's version and a random salt) and the piece's plaintext cut into segments of SEGMENT_BYTES (the last one
shorter, or empty for an empty piece), each stored with its authentication tag. An original is one piece per
upload part (every part but the last holds the file's part size of plaintext), so that parts sealed apart, in
any order and on any machine, assemble into one object the store concatenates; a variant and a tus tail are one
piece each.

Everything here follows from three numbers a reader knows from the rows: the plaintext size, the plaintext size
of a piece, and the segment size. A range of plaintext maps to the segments that hold it, and only those are
read and opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FORMAT_VERSION = 1
SEGMENT_BYTES = 64 * 1024  # what one ranged read decrypts at least (age and Tink use the same)
TAG_BYTES = 16  # AES-GCM's tag
SALT_BYTES = 31
HEADER_BYTES = 1 + SALT_BYTES  # the version, then the salt the piece's key is derived with
SEALED_SEGMENT_BYTES = SEGMENT_BYTES + TAG_BYTES


@dataclass(frozen=True)
class Wrapped:
    """A file's data key as its row stores it: the id of the keyring key that wrapped it, and the wrapped bytes
    (which open only with that key, for that file)."""

    key_id: str
    wrapped: bytes = field(repr=False)


def segments_of(plain_size: int) -> int:
    """How many segments a piece of `plain_size` bytes has: at least one (an empty piece is one empty,
    authenticated segment, so that even an empty file proves its end)."""
    if plain_size < 0:
        raise ValueError("a size is never negative")
    return max(1, -(-plain_size // SEGMENT_BYTES))


def sealed_size(plain_size: int) -> int:
    """The stored size of one piece of `plain_size` bytes."""
    return HEADER_BYTES + plain_size + TAG_BYTES * segments_of(plain_size)


def pieces_of(size: int, piece_size: int) -> int:
    """How many pieces an object of `size` plaintext bytes has when each holds `piece_size` (the last fewer)."""
    if piece_size < 1:
        raise ValueError("a piece holds at least one byte")
    return max(1, -(-size // piece_size))


def piece_plain_size(size: int, piece_size: int, index: int) -> int:
    """The plaintext bytes of piece `index` (from 0)."""
    count = pieces_of(size, piece_size)
    if not 0 <= index < count:
        raise ValueError("no such piece")
    return piece_size if index < count - 1 else size - piece_size * (count - 1)


def sealed_object_size(size: int, piece_size: int) -> int:
    """The stored size of a whole sealed object."""
    count = pieces_of(size, piece_size)
    return (count - 1) * sealed_size(piece_size) + sealed_size(piece_plain_size(size, piece_size, count - 1))


def plain_size_of(stored: int, piece_size: int) -> int | None:
    """The plaintext size of a sealed object of `stored` bytes whose pieces hold `piece_size` each (the last
    fewer), or None when no plaintext seals to that size (an object cut short, or not sealed so)."""
    count, rest = divmod(stored, sealed_size(piece_size))
    if rest == 0:
        return count * piece_size if count else None
    last = rest - HEADER_BYTES  # its plaintext and one tag per segment
    plain = last - TAG_BYTES * -(-last // SEALED_SEGMENT_BYTES)
    if plain < 0 or plain >= piece_size or sealed_size(plain) != rest:
        return None
    return count * piece_size + plain


def segment_plain_size(piece_plain: int, segment: int) -> int:
    """The plaintext bytes of segment `segment` of a piece of `piece_plain` bytes."""
    return max(0, min(SEGMENT_BYTES, piece_plain - segment * SEGMENT_BYTES))


@dataclass(frozen=True)
class PieceRead:
    """What a read takes of one piece: its segments `first_segment..last_segment`, and of their plaintext the
    `take` bytes after the first `skip`."""

    index: int  # the piece (from 0); an original's piece i is upload part i + 1
    offset: int  # where its header starts in the object
    plain_size: int
    first_segment: int
    last_segment: int  # inclusive
    skip: int
    take: int

    @property
    def final_segment(self) -> int:
        """The piece's own last segment: the one sealed with the final flag."""
        return segments_of(self.plain_size) - 1

    @property
    def segments_offset(self) -> int:
        """Where the first segment read starts in the object."""
        return self.offset + HEADER_BYTES + self.first_segment * SEALED_SEGMENT_BYTES

    @property
    def segments_end(self) -> int:
        """Where the last segment read ends in the object (exclusive)."""
        return (
            self.offset
            + HEADER_BYTES
            + self.last_segment * SEALED_SEGMENT_BYTES
            + segment_plain_size(self.plain_size, self.last_segment)
            + TAG_BYTES
        )

    def sealed_length(self, segment: int) -> int:
        """The stored length of one of its segments."""
        return segment_plain_size(self.plain_size, segment) + TAG_BYTES


def reads_for(size: int, piece_size: int, first: int = 0, length: int | None = None) -> list[PieceRead]:
    """The pieces and segments that hold plaintext bytes `first .. first + length - 1` of an object of `size`
    bytes (`length` None: to its end). A read of nothing touches nothing; the range must lie within the object.

    Raises:
        ValueError: the range is outside the object.
    """
    end = size if length is None else first + length
    if first < 0 or end < first or end > size:
        raise ValueError("the range is outside the object")
    if end == first:
        return []
    reads = []
    sealed_piece = sealed_size(piece_size)
    for index in range(first // piece_size, (end - 1) // piece_size + 1):
        start = index * piece_size
        plain = piece_plain_size(size, piece_size, index)
        lo, hi = max(first, start) - start, min(end, start + plain) - start  # within the piece, hi exclusive
        first_segment, last_segment = lo // SEGMENT_BYTES, (hi - 1) // SEGMENT_BYTES
        reads.append(
            PieceRead(
                index=index,
                offset=index * sealed_piece,
                plain_size=plain,
                first_segment=first_segment,
                last_segment=last_segment,
                skip=lo - first_segment * SEGMENT_BYTES,
                take=hi - lo,
            )
        )
    return reads


def whole(size: int, piece_size: int) -> list[PieceRead]:
    """Every segment of every piece, to read an object whole and prove it untouched and complete; an empty
    object's one empty segment too."""
    if size:
        return reads_for(size, piece_size)
    return [PieceRead(index=0, offset=0, plain_size=0, first_segment=0, last_segment=0, skip=0, take=0)]
