"""A clamd client over its INSTREAM protocol (D13): the file is streamed in chunks, never written to disk.

clamd closes the connection early when a stream exceeds its StreamMaxLength: it answers `INSTREAM size limit
exceeded. ERROR` and closes, so the client sees a broken pipe while still sending. The reply is read even
then: a size limit is a final answer about this file (D19), not an outage.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

CHUNK = 64 * 1024
SIZE_LIMIT_REPLY = "INSTREAM size limit exceeded. ERROR"


class ClamdUnavailable(Exception):
    """clamd could not be reached or did not answer in time: transient, the scan job retries."""


@dataclass(frozen=True)
class Verdict:
    """clamd's answer: `outcome` is clean, infected or error; `reason` says why an error is one
    (`size_limit`: over clamd's StreamMaxLength or scan.max_size; `clamd_error`: any other reply)."""

    outcome: str
    reason: str | None = None


def parse_address(address: str) -> tuple[str, int]:
    """host:port of `scan.clamd_address` (a bare :port means 127.0.0.1)."""
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def ping(address: str, timeout_s: float) -> None:
    """Raise ClamdUnavailable unless clamd answers PING with PONG within the timeout (readiness)."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(b"zPING\0")
            reply, _ = _read_reply(sock)
    except OSError as exc:
        raise ClamdUnavailable(type(exc).__name__) from None
    if not reply.startswith(b"PONG"):
        raise ClamdUnavailable("no PONG")


def instream(address: str, chunks: Iterable[bytes], timeout_s: float) -> Verdict:
    """Stream bytes to clamd and classify its reply.

    Returns:
        The verdict: clean for `stream: OK`, infected for `stream: <signature> FOUND`, error for anything
        else (a size limit, an ERROR reply, garbage).

    Raises:
        ClamdUnavailable: connection refused, reset or timed out with no reply at all.
    """
    host, port = parse_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise ClamdUnavailable(type(exc).__name__) from None
    with sock:
        sock.settimeout(timeout_s)
        send_error: OSError | None = None
        try:
            sock.sendall(b"zINSTREAM\0")
            for chunk in chunks:
                for start in range(0, len(chunk), CHUNK):
                    piece = chunk[start : start + CHUNK]
                    sock.sendall(struct.pack("!L", len(piece)) + piece)
            sock.sendall(struct.pack("!L", 0))
        except OSError as exc:
            send_error = exc  # clamd may have closed early with an answer: read it before giving up
        reply, read_error = _read_reply(sock)
    if not reply.rstrip(b"\0").strip():
        raise ClamdUnavailable(type(send_error or read_error or EOFError()).__name__)
    return classify(reply)


def _read_reply(sock: socket.socket) -> tuple[bytes, OSError | None]:
    reply = b""
    try:
        while not reply.endswith(b"\0") and len(reply) <= 65536:
            data = sock.recv(4096)
            if not data:
                break
            reply += data
    except OSError as exc:
        return reply, exc
    return reply, None


def classify(reply: bytes) -> Verdict:
    """The verdict of clamd's reply to an INSTREAM."""
    text = reply.rstrip(b"\0").decode("utf-8", "replace").strip()
    if text == "stream: OK":
        return Verdict("clean")
    if text.startswith("stream: ") and text.endswith(" FOUND"):
        return Verdict("infected")
    if text == SIZE_LIMIT_REPLY:
        return Verdict("error", "size_limit")
    return Verdict("error", "clamd_error")
