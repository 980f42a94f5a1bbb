"""A fake OpenAI chat-completions server in a thread of the test process that enforces rate limits per API key, as OpenAI does.

Each key has two token buckets that refill continuously: ``requests`` per
``window_s`` and ``tokens`` per ``window_s`` (OpenAI's are per minute; a
short window keeps the tests quick). A request that does not fit is refused
with a 429: in ``headers`` mode with OpenAI's ``x-ratelimit-*`` headers and
``retry-after-ms``/``retry-after``, else with ``retry-after`` (whole seconds)
alone. An answer that fits carries the headers too (in ``headers`` mode), and
its usage counts what the tokens bucket was charged. Every answer's text is a
judge's verdict (``{"pass": true, ...}``), so the same server plays targets
and judges.

``admitted`` and ``refused`` count per key; ``peak_in_flight`` is the most
requests answered at once.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web

VERDICT = '{"pass": true, "score": 1.0, "reason": "fine"}'
#: output tokens charged per answer
OUTPUT_TOKENS = 10


class _Bucket:
    def __init__(self, limit: float, window_s: float) -> None:
        self.limit, self.rate = float(limit), float(limit) / window_s
        self.level, self.at = float(limit), time.monotonic()

    def refill(self, now: float) -> None:
        self.level = min(self.limit, self.level + (now - self.at) * self.rate)
        self.at = now

    def until(self, cost: float) -> float:
        """Seconds until ``cost`` fits."""
        return max(0.0, (cost - self.level) / self.rate)

    def reset(self) -> float:
        """Seconds until the bucket is full."""
        return (self.limit - self.level) / self.rate


def _duration(seconds: float) -> str:
    """A Go duration as OpenAI writes one: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3f}s" if minutes else f"{rest:.3f}s"


class RateLimitedServer(ThreadedAioServer):
    thread_name = "ratelimited-server"

    def __init__(self, *, requests: int, tokens: int, window_s: float = 1.0, headers: bool = True, hold_s: float = 0.0) -> None:
        super().__init__()
        self.requests, self.tokens, self.window_s = requests, tokens, window_s
        self.headers, self.hold_s = headers, hold_s
        self._buckets: dict[str, tuple[_Bucket, _Bucket]] = {}
        self.admitted: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    def _limits(self, req: _Bucket, tok: _Bucket) -> dict[str, str]:
        if not self.headers:
            return {}
        return {
            "x-ratelimit-limit-requests": str(self.requests),
            "x-ratelimit-remaining-requests": str(int(req.level)),
            "x-ratelimit-reset-requests": _duration(req.reset()),
            "x-ratelimit-limit-tokens": str(self.tokens),
            "x-ratelimit-remaining-tokens": str(int(tok.level)),
            "x-ratelimit-reset-tokens": _duration(tok.reset()),
        }

    async def _chat(self, request: web.Request) -> web.Response:
        body: Any = await request.json()
        key = request.headers.get("Authorization", "")
        prompt_tokens = max(1, len(json.dumps(body.get("messages"))) // 4)
        cost = prompt_tokens + OUTPUT_TOKENS
        buckets = self._buckets.get(key)
        if buckets is None:
            buckets = self._buckets[key] = (_Bucket(self.requests, self.window_s), _Bucket(self.tokens, self.window_s))
        req, tok = buckets
        now = time.monotonic()
        req.refill(now)
        tok.refill(now)
        if req.level < 1 or tok.level < cost:
            self.refused[key] += 1
            wait = max(req.until(1), tok.until(cost))
            headers = self._limits(req, tok)
            if self.headers:
                headers["retry-after-ms"] = str(math.ceil(wait * 1000))
            headers["retry-after"] = str(max(1, math.ceil(wait)))
            error = {"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}
            return web.json_response(error, status=429, headers=headers)
        req.level -= 1
        tok.level -= cost
        self.admitted[key] += 1
        headers = self._limits(req, tok)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.hold_s:
                await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": VERDICT}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": OUTPUT_TOKENS, "total_tokens": cost},
        }
        return web.json_response(answer, headers=headers)
