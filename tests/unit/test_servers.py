"""A server a test serves on a thread stops at once when told (serve_forever's own default waits up to half a
second for its next look at the shutdown request)."""

from __future__ import annotations

import socket
import socketserver
import time

from tests.support.servers import serve_in_thread


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(self.request.recv(16))


def test_five_servers_answer_and_stop_in_less_time_than_one_default_poll():
    spent = 0.0
    for _ in range(5):
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
        thread = serve_in_thread(server, "echo")
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as conn:
            conn.sendall(b"ping")
            assert conn.recv(16) == b"ping"
        start = time.monotonic()
        server.shutdown()
        spent += time.monotonic() - start
        server.server_close()
        thread.join(5)
        assert not thread.is_alive()
    assert spent < 0.5, f"five shutdowns took {spent:.2f} s"
