"""A real HTTP receiver of webhooks on loopback (issue 28): a threading HTTP server on a port the operating system
hands out, answering each request with the next scripted answer (a status, or `hang`: read the request and never
answer until the server stops), and keeping every request's headers and body."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int | None


class Receiver:
    def __init__(self, *answers: int | str, default: int | str = 204):
        self.answers = list(answers)
        self.default = default
        self.received: list[Received] = []
        self.stopping = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                receiver.received.append(Received({k.lower(): v for k, v in self.headers.items()}, body,
                                                  None if answer == "hang" else int(answer)))
                if answer == "hang":
                    receiver.stopping.wait(60)  # never answers while the test runs
                    return
                self.send_response(int(answer))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
