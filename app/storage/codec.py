# A sealed object never yields a byte that did not authenticate: every segment is opened whole before any of its
# plaintext leaves, a segment out of place (moved, swapped with another piece's or file's, replayed from another
# position) does not open, and a piece cut short is found by its final segment, which alone carries the final flag.
"""Sealing a file's bytes under its own data key: a streaming AEAD in fixed segments (the STREAM construction of
Hoang, Reyhanitabar, Rogaway and Vizár, as age and Tink use it), on AES-256-GCM.

Each piece (an upload part, a variant, a tus tail) gets a key of its own, derived with HKDF-SHA256 from the file's
data key, a random salt written in the piece's header, and the piece's identity (file id, role, part number), so
that a part written twice never reuses a nonce and a piece never opens as another. A segment's nonce is its
index (11 bytes) and the final flag (1 byte). Where the segments lie is app/domain/sealing.py.
"""

from __future__ import annotations

import os
import uuid
from typing import Callable, Iterable, Iterator

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.domain.sealing import (FORMAT_VERSION, HEADER_BYTES, SALT_BYTES, SEGMENT_BYTES, PieceRead, reads_for,
                                whole)
from app.errors import ContentCorrupt

_INFO = b"lethe sealed piece v1\x00"
_OUT_BYTES = 1024 * 1024  # plaintext handed on at a time when reading a long run of segments
_CONTIGUOUS_GAP = 256 * 1024  # a read that starts this close to its piece's header fetches both at once

# (first byte, length) -> the stored bytes in chunks; the generator is closed when done (ObjectStore.open).
Fetch = Callable[[int, int], Iterator[bytes]]

ORIGINAL = "original"


def tail_role(number: int) -> str:
    """The role a tus upload's tail is sealed under: the bytes that begin part `number`."""
    return f"tail:{number}"


def variant_role(name: str) -> str:
    """The role a variant's piece is sealed under: its name is part of its identity."""
    return f"variant:{name}"


def _nonce(index: int, final: bool) -> bytes:
    return index.to_bytes(11, "big") + (b"\x01" if final else b"\x00")


class Sealed:
    """One file's bytes under its data key.

    Args:
        file_id: the file; part of every piece's identity.
        data_key: the file's 32-byte data key (unwrapped from its row by the keyring).
        piece_size: plaintext bytes of every piece of its original but the last (the upload's part size).
    """

    def __init__(self, file_id: uuid.UUID, data_key: bytes, piece_size: int):
        if len(data_key) != 32:
            raise ValueError("a data key is 32 bytes")
        self.file_id, self.piece_size = file_id, piece_size
        self._data_key = data_key

    def __repr__(self) -> str:  # never the key
        return f"Sealed(file_id={self.file_id}, piece_size={self.piece_size})"

    def _aead(self, salt: bytes, role: str, number: int) -> AESGCM:
        info = _INFO + self.file_id.bytes + role.encode() + b"\x00" + number.to_bytes(4, "big")
        return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(self._data_key))

    # -- sealing -------------------------------------------------------------------------------------------------

    def seal(self, role: str, number: int, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Seal plaintext as it arrives into one piece: its header, then its segments, a chunk out for each
        chunk in (no piece is held whole). An error raised by `chunks` propagates (the writer keeps nothing)."""
        salt = os.urandom(SALT_BYTES)
        aead = self._aead(salt, role, number)
        yield bytes([FORMAT_VERSION]) + salt
        pending = bytearray()
        index = 0
        for chunk in chunks:
            pending += chunk
            ready = (len(pending) - 1) // SEGMENT_BYTES  # keep a byte back: the last segment is the final one
            if ready <= 0:
                continue
            out = bytearray()
            with memoryview(pending) as view:
                for segment in range(ready):
                    out += aead.encrypt(_nonce(index, False), view[segment * SEGMENT_BYTES:(segment + 1) * SEGMENT_BYTES],
                                        None)
                    index += 1
            del pending[:ready * SEGMENT_BYTES]
            yield bytes(out)
        yield aead.encrypt(_nonce(index, True), bytes(pending), None)

    def seal_bytes(self, role: str, number: int, data: bytes) -> bytes:
        """One piece of plaintext held in memory, sealed."""
        return b"".join(self.seal(role, number, [data]))

    # -- opening -------------------------------------------------------------------------------------------------

    def open(self, fetch: Fetch, role: str, size: int, first: int = 0, length: int | None = None,
             piece_size: int | None = None) -> Iterator[bytes]:
        """The plaintext bytes `first .. first + length - 1` of a sealed object of `size` plaintext bytes, opened
        from the segments that hold them alone. `piece_size`: plaintext bytes per piece (the original's part
        size; None: the object is one piece, a variant or a tail).

        Raises (while iterating):
            ContentCorrupt: a header, a segment or the object's length is not what this file sealed.
            NotFound: the object is missing.
        """
        pieces = piece_size if piece_size is not None else max(size, 1)
        return self._opened(fetch, role, reads_for(size, pieces, first, length))

    def open_whole(self, fetch: Fetch, role: str, size: int, piece_size: int | None = None) -> Iterator[bytes]:
        """The whole plaintext, with every segment (an empty object's too) proven untouched and complete."""
        pieces = piece_size if piece_size is not None else max(size, 1)
        return self._opened(fetch, role, whole(size, pieces))

    def _opened(self, fetch: Fetch, role: str, reads: list[PieceRead]) -> Iterator[bytes]:
        out: list[bytes] = []
        held = 0
        for piece in reads:
            for plain in self._piece(fetch, role, piece):
                out.append(plain)
                held += len(plain)
                if held >= _OUT_BYTES:
                    yield b"".join(out)
                    out, held = [], 0
        if out:
            yield b"".join(out)

    def _piece(self, fetch: Fetch, role: str, piece: PieceRead) -> Iterator[bytes]:
        header_end = piece.offset + HEADER_BYTES
        together = piece.segments_offset - header_end <= _CONTIGUOUS_GAP
        stream = _Reader(fetch(piece.offset, (piece.segments_end if together else header_end) - piece.offset))
        try:
            header = stream.take(HEADER_BYTES)
            if header[0] != FORMAT_VERSION:
                raise ContentCorrupt("content_corrupt", "A stored piece is not in a format this version reads.")
            if together:
                stream.take(piece.segments_offset - header_end)
            else:
                stream.close()
                stream = _Reader(fetch(piece.segments_offset, piece.segments_end - piece.segments_offset))
            aead = self._aead(header[1:], role, piece.index + 1)
            for segment in range(piece.first_segment, piece.last_segment + 1):
                sealed = stream.take(piece.sealed_length(segment))
                try:
                    plain = aead.decrypt(_nonce(segment, segment == piece.final_segment), sealed, None)
                except InvalidTag:
                    raise ContentCorrupt("content_corrupt", "A stored segment did not authenticate.") from None
                start = piece.skip if segment == piece.first_segment else 0
                stop = start + min(len(plain) - start, piece.take - _taken(piece, segment))
                yield plain if (start, stop) == (0, len(plain)) else plain[start:stop]
        finally:
            stream.close()


def _taken(piece: PieceRead, segment: int) -> int:
    """Plaintext of the piece handed on before `segment`."""
    if segment == piece.first_segment:
        return 0
    return (segment - piece.first_segment) * SEGMENT_BYTES - piece.skip


class _Reader:
    """Exact reads from a stream of chunks (a read position, so that a long chunk is never shifted per read)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = bytearray()
        self._at = 0

    def take(self, count: int) -> bytes:
        while len(self._buffer) - self._at < count:
            chunk = next(self._chunks, None)
            if chunk is None:
                raise ContentCorrupt("content_corrupt", "A stored object is shorter than what was sealed.")
            if self._at:
                del self._buffer[:self._at]
                self._at = 0
            self._buffer += chunk
        taken = bytes(self._buffer[self._at:self._at + count])
        self._at += count
        return taken

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
