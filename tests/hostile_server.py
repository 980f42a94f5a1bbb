"""A hostile HTTP server for tests: endless, huge and compressed-bomb answers on 127.0.0.1 (aiohttp.web in a thread).

The first path segment picks the behaviour, for an OpenAI-style provider
(``POST /{mode}/v1/chat/completions``) and an agent Engine
(``POST /{mode}/execute``, Server-Sent Events) alike:

- ``ok``: a small, correct answer;
- ``endless``: a chunked body that never ends;
- ``huge``: a body that announces (Content-Length) and sends 2 GB;
- ``gzip``: ``Content-Encoding: gzip``, about 1 MB expanding to 1 GiB;
- ``deflate``: the same bomb as zlib ``deflate``;
- ``gzipline``: 1 GiB of zeros behind 1 MB of gzip for both (for an SSE
  client, one line that never ends);
- ``noline``: an endless body without a line end;
- ``escapes``: HTTP 500 whose JSON error message (provider) or plain body
  (engine) is full of terminal controls: OSC title and hyperlink, CSI cursor
  moves and screen clear, a hiding SGR, NUL, BEL, CR, a bidi override and a
  zero-width space (:data:`TERMINAL_ATTACK`).

The server stops writing when the client goes away; :attr:`HostileServer.sent`
counts the bytes it put on the wire, :attr:`HostileServer.hits` the requests
per mode.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections import Counter
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web

CHUNK = 64 * 1024
HUGE = 2 * 1000**3
BOMB_MIB = 1024  # the bombs expand to 1 GiB

_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "hostile",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris is the capital. 4. 30 days."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
}
#: what a hostile server puts in an error to take over a terminal
TERMINAL_ATTACK = (
    "boom\x1b]0;pwned title\x07 \x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
    " \x1b[2J\x1b[1;1H\x1b[8mhidden\x1b[0m\x00nul\x07bell\rall cells passed\u202eevil\u200bzw\x9b31m"
)
_SSE_DELTA = b'event: text_delta\ndata: {"text": "' + b"x" * 1000 + b'"}\n\n'


#: one MiB of Server-Sent Events comment lines (which a client reads and drops)
SSE_COMMENTS = (b": " + b"k" * 61 + b"\n") * (1 << 14)


def bombs(mib: int, block: bytes = bytes(1 << 20)) -> tuple[bytes, bytes]:
    """(gzip, zlib-deflate) bodies of ``block`` (one MiB) ``mib`` times, a few KB per MiB, built without compressing it all.

    After a full flush deflate restarts from nothing, so the block
    compresses to the same bytes every time: the stream is that piece
    repeated, then the final block and the trailer (CRC and size / Adler-32).
    """
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()
    crc, adler = 0, 1
    for _ in range(mib):
        crc, adler = zlib.crc32(block, crc), zlib.adler32(block, adler)
    deflated = piece * mib + end
    size = (mib * len(block)) & 0xFFFFFFFF
    gzip_body = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + deflated + struct.pack("<II", crc, size)
    zlib_body = b"\x78\xda" + deflated + struct.pack(">I", adler)
    return gzip_body, zlib_body


class HostileServer(ThreadedAioServer):
    thread_name = "hostile-server"

    def __init__(self, *, bomb_mib: int = BOMB_MIB) -> None:
        self.bombs = {"application/json": bombs(bomb_mib), "text/event-stream": bombs(bomb_mib, SSE_COMMENTS)}
        self.sent = 0
        self.hits: Counter[str] = Counter()
        super().__init__()

    def start(self) -> HostileServer:
        super().start()
        return self

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{mode}/v1/chat/completions", self._provider)
        app.router.add_post("/{mode}/execute", self._engine)

    async def _send(self, resp: web.StreamResponse, data: bytes) -> None:
        await resp.write(data)
        self.sent += len(data)

    async def _answer(self, request: web.Request, small: bytes, repeat: bytes, content_type: str) -> web.StreamResponse:
        mode = request.match_info["mode"]
        self.hits[mode] += 1
        await request.read()
        if mode == "ok":
            return web.Response(body=small, content_type=content_type)
        if mode == "escapes":
            if content_type == "application/json":
                body = json.dumps({"error": {"message": TERMINAL_ATTACK, "type": "server_error"}}).encode()
            else:
                body, content_type = TERMINAL_ATTACK.encode(), "text/plain"
            return web.Response(status=500, body=body, content_type=content_type)
        if mode == "backtrack":  # an error body that makes a careless regex in a provider definition backtrack
            return web.Response(status=500, body=b"a" * 40 + b"!", content_type="text/plain")
        if mode in ("gzip", "deflate", "gzipline"):
            gzip_body, deflate_body = self.bombs["application/json" if mode == "gzipline" else content_type]
            body = deflate_body if mode == "deflate" else gzip_body
            return web.Response(body=body, headers={"Content-Type": content_type, "Content-Encoding": mode.removesuffix("line")})
        if mode == "noline":
            mode, repeat = "endless", b"x"
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        if mode == "huge":
            resp.content_length = HUGE
        await resp.prepare(request)
        block = repeat * max(1, CHUNK // len(repeat))
        sent = 0
        try:
            while mode == "endless" or sent < HUGE:
                await self._send(resp, block)
                sent += len(block)
        except (ConnectionError, RuntimeError):
            pass  # the client gave up, as it should
        return resp

    async def _provider(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, json.dumps(_ANSWER).encode(), b" ", "application/json")

    async def _engine(self, request: web.Request) -> web.StreamResponse:
        small = _SSE_DELTA + b"event: done\ndata: {}\n\n"
        return await self._answer(request, small, _SSE_DELTA, "text/event-stream")


def config_target(**fields: Any) -> str:
    """One flow-style YAML target entry."""
    return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in fields.items()) + "}"
