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
from collections.abc import Callable, Iterable, Iterator

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.domain.sealing import (
    FORMAT_VERSION,
    HEADER_BYTES,
    SALT_BYTES,
    SEALED_SEGMENT_BYTES,
    SEGMENT_BYTES,
    TAG_BYTES,
    PieceRead,
    reads_for,
    segment_plain_size,
    whole,
)
from app.errors import ContentCorrupt

_INFO = b"lethe sealed piece v1\x00"
_OUT_BYTES = 1024 * 1024  # plaintext handed on at a time
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
                    out += aead.encrypt(
                        _nonce(index, False), view[segment * SEGMENT_BYTES : (segment + 1) * SEGMENT_BYTES], None
                    )
                    index += 1
            del pending[: ready * SEGMENT_BYTES]
            yield bytes(out)
        yield aead.encrypt(_nonce(index, True), bytes(pending), None)

    def seal_bytes(self, role: str, number: int, data: bytes) -> bytes:
        """One piece of plaintext held in memory, sealed."""
        return b"".join(self.seal(role, number, [data]))

    # -- opening -------------------------------------------------------------------------------------------------

    def open(
        self,
        fetch: Fetch,
        role: str,
        size: int,
        first: int = 0,
        length: int | None = None,
        piece_size: int | None = None,
    ) -> Iterator[bytes]:
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
        # Pieces read through their end and on from the next one's start are one run of the object: one fetch
        # (a whole download is one GET, never one per part), opened segment by segment straight into a buffer
        # handed on a MiB at a time (measured: fewer, larger writes beat a chunk per segment, and decrypting in
        # place beats a copy per segment).
        out = _Out(sum(read.take for read in reads))
        try:
            start = 0
            while start < len(reads):
                stop = start + 1
                while (
                    stop < len(reads)
                    and reads[stop - 1].last_segment == reads[stop - 1].final_segment
                    and reads[stop].first_segment == 0
                    and reads[stop].offset == reads[stop - 1].segments_end
                ):
                    stop += 1
                yield from self._run(fetch, role, reads[start:stop], out)
                start = stop
            if out.used:
                yield out.take()
        finally:
            out.release()

    def _run(self, fetch: Fetch, role: str, run: list[PieceRead], out: _Out) -> Iterator[bytes]:
        first = run[0]
        header_end = first.offset + HEADER_BYTES
        together = first.segments_offset - header_end <= _CONTIGUOUS_GAP
        header = None
        if not together:
            with _Reader(fetch(first.offset, HEADER_BYTES)) as alone:
                header = alone.take(HEADER_BYTES)
        begin = first.offset if together else first.segments_offset
        with _Reader(fetch(begin, run[-1].segments_end - begin)) as stream:
            for number, piece in enumerate(run):
                if number or together:
                    header = stream.take(HEADER_BYTES)
                    if number == 0:
                        stream.skip(piece.segments_offset - header_end)
                assert header is not None
                if header[0] != FORMAT_VERSION:
                    raise ContentCorrupt("content_corrupt", "A stored piece is not in a format this version reads.")
                aead = self._aead(header[1:], role, piece.index + 1)
                first_segment, last_segment, final = piece.first_segment, piece.last_segment, piece.final_segment
                for segment in range(first_segment, last_segment + 1):
                    if first_segment < segment < last_segment:
                        # inside the read, before the piece's last segment: whole, kept whole (a whole download is
                        # almost only these, so they take the shortest way)
                        start, keep, length = 0, SEGMENT_BYTES, SEALED_SEGMENT_BYTES
                    else:
                        start = piece.skip if segment == first_segment else 0
                        keep = min(
                            segment_plain_size(piece.plain_size, segment) - start, piece.take - _taken(piece, segment)
                        )
                        length = piece.sealed_length(segment)
                    sealed = stream.view(length)
                    try:
                        out.open_into(aead, _nonce(segment, segment == final), sealed, start, keep)
                    except InvalidTag:
                        raise ContentCorrupt("content_corrupt", "A stored segment did not authenticate.") from None
                    finally:
                        sealed.release()
                    if out.used >= _OUT_BYTES:
                        yield out.take()


def _taken(piece: PieceRead, segment: int) -> int:
    """Plaintext of the piece handed on before `segment`."""
    if segment == piece.first_segment:
        return 0
    return (segment - piece.first_segment) * SEGMENT_BYTES - piece.skip


# Full output buffers, kept for the next read: a new bytearray is zeroed, a MiB for every read of a MiB or more
# (measured: zeroing cost as many instructions as the copy out). list.pop and list.append are atomic.
_POOLED_BYTES = _OUT_BYTES + SEGMENT_BYTES
_POOL: list[bytearray] = []
_POOL_MAX = 16


def _pooled() -> bytearray:
    try:
        return _POOL.pop()  # another thread may have taken the last one: no check before
    except IndexError:
        return bytearray(_POOLED_BYTES)


class _Out:
    """The plaintext opened so far, in one buffer segments are decrypted into (no copy per segment)."""

    def __init__(self, total: int) -> None:
        # as large as what is handed on at once (a segment more: a MiB may end inside one), never larger than
        # the whole read (a small range allocates little); a full one comes from the pool when it has one
        size = min(total, _OUT_BYTES) + SEGMENT_BYTES
        self._buffer = _pooled() if size == _POOLED_BYTES else bytearray(size)
        self._segment: bytearray | None = None  # for a segment only part of which is kept
        self.used = 0

    def release(self) -> None:
        """Give a full buffer back to the pool (what it holds is overwritten before it is read again)."""
        if len(self._buffer) == _POOLED_BYTES and len(_POOL) < _POOL_MAX:
            _POOL.append(self._buffer)
        self._buffer = bytearray()

    def open_into(self, aead: AESGCM, nonce: bytes, sealed: memoryview, start: int, keep: int) -> None:
        """Decrypt one segment (it authenticates whole, or raises InvalidTag); keep its plaintext bytes
        `start .. start + keep - 1`."""
        plain = len(sealed) - TAG_BYTES
        if (start, keep) == (0, plain):
            with memoryview(self._buffer) as view:
                aead.decrypt_into(nonce, sealed, None, view[self.used : self.used + plain])
        else:
            if self._segment is None:
                self._segment = bytearray(SEGMENT_BYTES)
            with memoryview(self._segment) as view:
                aead.decrypt_into(nonce, sealed, None, view[:plain])
                self._buffer[self.used : self.used + keep] = view[start : start + keep]
        self.used += keep

    def take(self) -> bytes:
        with memoryview(self._buffer) as view:
            taken = bytes(view[: self.used])  # the one copy: a WSGI server takes bytes
        self.used = 0
        return taken


class _Reader:
    """Exact reads from a stream of chunks: a segment that lies within one chunk is read in place (a view of the
    chunk, no copy); only one that straddles two chunks is put together."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._chunk = b""
        self._at = 0

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next(self) -> bytes:
        chunk = next(self._chunks, None)
        if chunk is None:
            raise ContentCorrupt("content_corrupt", "A stored object is shorter than what was sealed.")
        return chunk

    def view(self, count: int) -> memoryview:
        """The next `count` bytes (release the view, with a `with`, when done)."""
        if len(self._chunk) - self._at >= count:
            view = memoryview(self._chunk)[self._at : self._at + count]
            self._at += count
            return view
        parts = bytearray(memoryview(self._chunk)[self._at :])
        while True:
            chunk = self._next()
            need = count - len(parts)
            if len(chunk) >= need:
                parts += memoryview(chunk)[:need]
                self._chunk, self._at = chunk, need
                return memoryview(parts)
            parts += chunk

    def take(self, count: int) -> bytes:
        with self.view(count) as view:
            return bytes(view)

    def skip(self, count: int) -> None:
        self.view(count).release()

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()
