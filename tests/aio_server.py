"""An aiohttp app served on 127.0.0.1 from a thread of its own: the lifecycle the tests' fake servers share."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from aiohttp import web

#: the longest a request waits for the others of its ``gather`` (a limit set too low fails the test, after this long)
GATHER_S = 30.0


async def gathered(server: Any, n: int) -> None:
    """Wait until ``server.peak_in_flight`` has reached ``n`` (a latch: later requests pass at once), at most :data:`GATHER_S`.

    A fake server's requests wait here so that a test of a concurrency limit
    sees the full peak however slowly a loaded machine sends them; a limit
    below ``n`` never reaches it, and the test fails after :data:`GATHER_S`.
    """
    deadline = time.monotonic() + GATHER_S
    while server.peak_in_flight < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


class ThreadedAioServer:
    """Subclasses add their routes in :meth:`routes`; :meth:`start` returns once the port listens."""

    thread_name = "test-server"

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name=self.thread_name, daemon=True)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def start(self) -> Any:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.thread_name} did not start")
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def setup() -> None:
            app = web.Application()
            self.routes(app)
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            await web.SockSite(self._runner, self._sock).start()  # listening once this returns

        self._loop.run_until_complete(setup())
        self._ready.set()
        self._loop.run_forever()
