"""A TCP proxy of our own to cut or stall a real service (PostgreSQL, RabbitMQ, moto's S3) in a test.

It listens on 127.0.0.1 on a port the operating system hands out and forwards to one upstream. Three modes:

- pass: bytes flow both ways.
- refuse: every open connection is reset and the port refuses new ones (a server that is down).
- blackhole: connections are accepted and nothing is forwarded in either direction, not even a close
  (packets dropped: a partition). On `pass()` what was held flows again, as after a healed partition.

It runs its own asyncio loop in a daemon thread; the mode methods are called from the test's thread.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import Future
from typing import Any


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int):
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self.connections = 0  # accepted so far

    # -- the test's side -------------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._start())
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pass_(self) -> None:
        self._call(self._pass())

    def refuse(self) -> None:
        self._call(self._refuse())

    def blackhole(self) -> None:
        self._call(self._blackhole())

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro) -> None:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        future.result(10)

    # -- the loop's side -------------------------------------------------------------------------------------

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        await self._listen()

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._handle, sock=sock)

    async def _pass(self) -> None:
        await self._open("pass")

    async def _blackhole(self) -> None:
        await self._open("blackhole")

    async def _open(self, mode: str) -> None:
        """Listen (again, on the same port, after a refuse) and let bytes flow or hold them."""
        if self._server is None:
            await self._listen()
        self.mode = mode
        assert self._flowing is not None
        if mode == "pass":
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _refuse(self) -> None:
        self.mode = "refuse"
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._transports):
            transport.abort()  # a reset, as from a server that went away
        self._transports.clear()
        assert self._flowing is not None
        self._flowing.set()  # held pumps wake up and find their transports gone

    async def _shutdown(self) -> None:
        await self._refuse()  # every transport aborted: the pumps and handlers end by themselves
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        await asyncio.wait(tasks, timeout=2) if tasks else None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._transports.add(writer.transport)
        assert self._flowing is not None
        await self._flowing.wait()
        if self.mode == "refuse" or writer.transport.is_closing():
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self._transports.add(up_writer.transport)
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        self._transports.discard(writer.transport)
        self._transports.discard(up_writer.transport)

    async def _pump(self, source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await source.read(65536)
                await self._flowing.wait()  # a blackhole holds what arrived, and a close too
                if not data:
                    break
                target.write(data)
                await target.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not target.transport.is_closing():
                target.close()
