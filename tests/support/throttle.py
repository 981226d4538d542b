"""An S3 endpoint that throttles: an HTTP proxy in front of a real S3 server (SeaweedFS, moto) that answers
`503 SlowDown` (S3's own error document) above a rate, as providers cap DELETE per bucket. Every key of a
DeleteObjects counts against the rate (as S3 counts them); any other request counts one. A token bucket of
`rate` tokens a second, holding at most `burst`; a request that finds too few tokens is refused whole, and
costs nothing. Requests go on to the server as they came (the Host header too: signatures stay valid)."""

from __future__ import annotations

import http.client
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.support.servers import serve_in_thread

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request '
    b"rate.</Message><RequestId>throttle</RequestId><HostId>throttle</HostId></Error>"
)
_OBJECT = re.compile(rb"<Object>")
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class ThrottlingProxy:
    def __init__(self, upstream: str, rate: float, burst: float | None = None):
        self.upstream = upstream  # host:port
        self.rate = rate
        self.burst = burst if burst is not None else rate
        self._tokens = self.burst
        self._at = time.monotonic()
        self._lock = threading.Lock()
        self.refused = 0  # requests answered SlowDown
        self.keys_deleted = 0  # keys of DeleteObjects requests let through
        self.first_pass: float | None = None
        self.last_pass: float | None = None
        self._server: ThreadingHTTPServer | None = None
        self._local = threading.local()

    def _take(self, cost: int) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens < cost:
                self.refused += 1
                return False
            self._tokens -= cost
            return True

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            host, port = self.upstream.rsplit(":", 1)
            conn = self._local.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        return conn

    def start(self) -> ThrottlingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                query = {part.split("=", 1)[0] for part in urlsplit(self.path).query.split("&")}
                deleting = self.command == "POST" and "delete" in query
                cost = max(1, len(_OBJECT.findall(body))) if deleting else 1
                if not proxy._take(cost):
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(SLOW_DOWN)))
                    self.end_headers()
                    self.wfile.write(SLOW_DOWN)
                    return
                if deleting:
                    with proxy._lock:
                        proxy.keys_deleted += cost
                        proxy.first_pass = proxy.first_pass or time.monotonic()
                        proxy.last_pass = time.monotonic()
                headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP}
                for attempt in (1, 2):  # a kept-alive connection the server closed meanwhile: once more
                    conn = proxy._connection()
                    try:
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        answer = conn.getresponse()
                        data = answer.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        proxy._local.conn = None
                        if attempt == 2:
                            raise
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in _HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        serve_in_thread(self._server, "throttled-store")
        return self

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
