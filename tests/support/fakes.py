"""Fakes the standards allow: a clamd reply, a broker that records, a clock (app.platform.clock.FakeClock)."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from typing import Any

from tests.support.servers import serve_in_thread

EICAR_REPLY = b"stream: Eicar-Test-Signature FOUND\0"


class FakeClamd:
    """A clamd on 127.0.0.1 that reads an INSTREAM and answers by mode: "ok", "eicar", "garbage", "hold" (waits
    until release() before answering OK: a scan delayed while something else happens), or "limit": like the
    real clamd over its StreamMaxLength (`limit` bytes), it answers `INSTREAM size limit exceeded. ERROR` as
    soon as the stream passes the limit and closes the connection without reading the rest, so the client
    meets a broken pipe while it still sends. An unknown mode is refused at once (a test that set one
    passed by accident once)."""

    MODES = ("ok", "eicar", "garbage", "hold", "limit")

    def __init__(self, limit: int = 1024 * 1024):
        self._mode = "ok"
        self.limit = limit
        self.received: list[bytes] = []
        self.release_event = threading.Event()
        self.started_event = threading.Event()
        fake = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                command = b""
                while not command.endswith(b"\0"):
                    chunk = self.request.recv(1)
                    if not chunk:
                        return
                    command += chunk
                if command == b"zPING\0":
                    self.request.sendall(b"PONG\0")
                    return
                data = b""
                while True:
                    header = self._read(4)
                    (length,) = struct.unpack("!L", header)
                    if length == 0:
                        break
                    data += self._read(length)
                    if fake.mode == "limit" and len(data) > fake.limit:
                        # clamd: reply, then close with the rest of the stream unread (the client's send fails)
                        self.request.sendall(b"INSTREAM size limit exceeded. ERROR\0")
                        self.request.shutdown(socket.SHUT_RDWR)
                        return
                fake.received.append(data)
                fake.started_event.set()
                if fake.mode == "hold":
                    fake.release_event.wait(30)
                reply = {
                    "ok": b"stream: OK\0",
                    "hold": b"stream: OK\0",
                    "eicar": EICAR_REPLY,
                    "garbage": b"\x07\x01 what?\0",
                    "limit": b"stream: OK\0",
                }[fake.mode]
                self.request.sendall(reply)

            def _read(self, size):
                buf = b""
                while len(buf) < size:
                    chunk = self.request.recv(size - len(buf))
                    if not chunk:
                        raise ConnectionError("short read")
                    buf += chunk
                return buf

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = serve_in_thread(self.server, "fake-clamd")

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in self.MODES:
            raise ValueError(f"FakeClamd has no mode {mode!r}; modes: {', '.join(self.MODES)}")
        self._mode = mode

    def release(self):
        self.release_event.set()

    def close(self):
        self.release_event.set()
        self.server.shutdown()
        self.server.server_close()


class RecordingBroker:
    """A broker that keeps what is published, so a test can run the jobs itself (D17: tests call actor
    functions directly)."""

    def __init__(self):
        self.messages = []
        self.fail = False

    def enqueue(self, message, *, delay=None):
        if self.fail:
            raise ConnectionError("broker down")
        self.messages.append(message)
        return message

    def close(self):
        pass

    def take(self, actor_name: str | None = None) -> list[Any]:
        taken = [m for m in self.messages if actor_name is None or m.actor_name == actor_name]
        self.messages = [m for m in self.messages if m not in taken]
        return taken
