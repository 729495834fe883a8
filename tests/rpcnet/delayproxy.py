"""A userspace TCP delay proxy: an emulated LAN between llama-server and a ggml-rpc-server.

``tc qdisc ... netem delay`` would be the kernel's way, but this kernel has no ``sch_netem`` ("Specified
qdisc kind is unknown"), so the RPC benchmark and tests put this proxy in front of each RPC host instead.
Every chunk read from one side is written to the other ``delay_ms`` after it arrived, per direction and in
order (one-way latency ``delay_ms``, round trip ``2 × delay_ms``, like netem on ``lo`` where every packet
crosses the delaying egress once); bandwidth is not limited. Runs an asyncio loop on its own thread.

    with DelayProxy(("127.0.0.1", rpc_port), delay_ms=5) as proxy:
        ... llama-server --rpc 127.0.0.1:{proxy.port} ...
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any


class DelayProxy:
    """Listen on ``127.0.0.1:port`` (``port`` 0 = any free one; see :attr:`port`) and forward to
    ``upstream`` with ``delay_ms`` milliseconds added in each direction."""

    def __init__(self, upstream: tuple[str, int], delay_ms: float, port: int = 0) -> None:
        self.upstream = upstream
        self.delay_s = max(0.0, delay_ms) / 1000.0
        self._want_port = port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="delay-proxy", daemon=True)

    def __enter__(self) -> DelayProxy:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> None:
        """Start listening (returns once the port is bound)."""
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("delay proxy did not start")

    def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self._want_port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        _nodelay(writer)
        _nodelay(up_w)
        await asyncio.gather(self._pump(reader, up_w), self._pump(up_r, writer), return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                data = await reader.read(1 << 20)
                queue.put_nowait((time.monotonic() + self.delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
            writer.close()


def _nodelay(writer: asyncio.StreamWriter) -> None:
    import socket

    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
