"""A clamd client over its INSTREAM protocol (D13): the file is streamed in chunks, never written to disk."""

from __future__ import annotations

import socket
import struct
from typing import Iterable

CHUNK = 64 * 1024


class ClamdUnavailable(Exception):
    """clamd could not be reached or did not answer in time: transient, the scan job retries."""


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def instream(address: str, chunks: Iterable[bytes], timeout_s: float) -> str:
    """Stream bytes to clamd and classify its reply.

    Returns:
        "clean" for `stream: OK`, "infected" for `stream: <signature> FOUND`, "error" for anything else
        (an ERROR reply, garbage, a size limit).

    Raises:
        ClamdUnavailable: connection refused, reset or timed out.
    """
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(b"zINSTREAM\0")
            for chunk in chunks:
                for start in range(0, len(chunk), CHUNK):
                    piece = chunk[start:start + CHUNK]
                    sock.sendall(struct.pack("!L", len(piece)) + piece)
            sock.sendall(struct.pack("!L", 0))
            reply = b""
            while not reply.endswith(b"\0"):
                data = sock.recv(4096)
                if not data:
                    break
                reply += data
                if len(reply) > 65536:
                    break
    except (OSError, socket.timeout) as exc:
        raise ClamdUnavailable(type(exc).__name__) from None
    return classify(reply)


def classify(reply: bytes) -> str:
    text = reply.rstrip(b"\0").decode("utf-8", "replace").strip()
    if text == "stream: OK":
        return "clean"
    if text.startswith("stream: ") and text.endswith(" FOUND"):
        return "infected"
    return "error"
