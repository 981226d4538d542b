"""A real HTTP receiver of webhooks on loopback (issue 28): a threading HTTP server on a port the operating system
hands out, answering each request with the next scripted answer (a status; `hang`: read the request and never
answer until the server stops; `trickle`: send the status line one byte every `trickle_s` seconds, never ending
it, as a slow or hostile receiver does), keeping every request's headers and body and counting the connections
open at once per webhook-id."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.servers import serve_in_thread


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int | None


class Receiver:
    def __init__(self, *answers: int | str, default: int | str = 204, trickle_s: float = 0.5):
        self.answers = list(answers)
        self.default = default
        self.trickle_s = trickle_s
        self.received: list[Received] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}  # connections open now, by webhook-id
        self.most: dict[str, int] = {}  # the most open at once, by webhook-id
        self.arrived: list[float] = []  # time.monotonic() of each request's arrival
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                import time

                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                    message = self.headers.get("webhook-id", "")
                    receiver.open[message] = receiver.open.get(message, 0) + 1
                    receiver.most[message] = max(receiver.most.get(message, 0), receiver.open[message])
                    receiver.arrived.append(time.monotonic())
                receiver.received.append(
                    Received(
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        int(answer) if str(answer).isdigit() else None,
                    )
                )
                try:
                    if answer == "hang":
                        receiver.stopping.wait(60)  # never answers while the test runs
                        return
                    if answer == "trickle":
                        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 10_000:
                            if receiver.stopping.wait(receiver.trickle_s):
                                return
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                        return
                    self.send_response(int(answer))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the client cut the connection
                finally:
                    with receiver.lock:
                        receiver.open[message] -= 1

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = serve_in_thread(self.server, "webhook-receiver")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
