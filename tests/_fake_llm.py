"""Fake LLM APIs on 127.0.0.1 for the provider tests: real HTTP, canned brains.

:class:`FakeLLMServer` runs an ``aiohttp.web`` app in a background thread
and serves three API shapes at once:

- OpenAI chat completions (``POST /v1/chat/completions``): text, tool calls
  (``arguments`` as a JSON string), usage with cached tokens; a system prompt
  that says "Sign every answer as NAME." gets answers ending " — NAME";
- OpenAI embeddings (``POST /v1/embeddings``): deterministic bag-of-words
  vectors (:func:`embedding_for`), so cosine similarity is word overlap;
- Anthropic messages (``POST /v1/messages``): ``x-api-key`` +
  ``anthropic-version``, top-level ``system``, ``text``/``tool_use`` blocks;
- a made-up "acme" API (``POST /acme/generate``) for the "add a provider by
  dropping a YAML file" test.

Every request is logged (method, path, headers, JSON body) for assertions.
``script(...)`` queues canned error responses (429 with Retry-After, a 500
burst, ...) served before the normal answers. ``hold_s`` makes every answer
take that long; ``peak_in_flight`` is the most requests it was answering at
once, ``arrivals`` when each request came in (``time.monotonic()``).
``gather = N`` holds every request until N have been in flight at the same
time (then ``hold_s`` more), so a test of a concurrency limit sees the full
peak however slowly a loaded machine sends the requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aio_server import gathered
from aiohttp import web

OPENAI_KEY = "sk-test-OPENAI-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-ABCDEF0123456789"


@dataclass
class Logged:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Canned:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    paths: tuple[str, ...] = ()  # only for these paths (all when empty)


def _words(text: str) -> int:
    return max(1, len(text.split()))


def answer_for(question: str) -> str:
    """The fake model's brain: a few canned facts, else an echo."""
    q = question.lower()
    if "2 + 2" in q or "2+2" in q:
        return "The answer is 4."
    if "capital of france" in q:
        return "Paris is the capital of France."
    if "refund" in q:
        return "You can request a refund within 30 days."
    return f"You said: {question}"


def answer_from_history(messages: list[dict[str, Any]]) -> str | None:
    """What the fake model says from the conversation so far (conversations, ``turns:``), or None: answer the last message alone.

    "what is my order number?" repeats the number a user message said earlier ("my order number is 1234"),
    else says it does not know; "how many messages" counts the user messages it was sent.
    """
    users = [str(m.get("content")) for m in messages if m.get("role") == "user"]
    last = users[-1].lower() if users else ""
    if "what is my order number" in last:
        for text in users[:-1]:
            found = re.search(r"order number is (\w+)", text, re.IGNORECASE)
            if found:
                return f"Your order number is {found.group(1)}."
        return "I do not know your order number."
    if "how many messages" in last:
        return f"You sent {len(users)} messages."
    return None


EMBEDDING_DIMENSIONS = 512


def embedding_for(text: str) -> list[float]:
    """A bag-of-words vector: each lowercased word adds 1 at a slot picked by its md5 (no model, same every time)."""
    vector = [0.0] * EMBEDDING_DIMENSIONS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % EMBEDDING_DIMENSIONS] += 1.0
    return vector


class FakeLLMServer:
    def __init__(self) -> None:
        self.requests: list[Logged] = []
        self.canned: deque[Canned] = deque()
        self.cached_tokens = 0  # reported as prompt-cache hits by the OpenAI shape
        self.hold_s = 0.0  # every answer takes this long
        self.gather = 0  # every answer waits until this many requests have been in flight at once (at most GATHER_S)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    # -- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeLLMServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, args=(sock,), name="fake-llm", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake LLM server did not start")
        wait_for_port(self.port)
        return self

    def _serve(self, sock: socket.socket) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = web.Application(middlewares=[self._count_in_flight])
        self.routes(app)
        runner = web.AppRunner(app, access_log=None)
        self._runner = runner
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.SockSite(runner, sock).start())
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    def routes(self, app: web.Application) -> None:
        """The endpoints served; a test's own fake overrides this and keeps the rest."""
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/embeddings", self._openai_embeddings)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/acme/generate", self._acme)

    @web.middleware
    async def _count_in_flight(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every request: counted while it is answered, held ``hold_s`` first."""
        self.arrivals.append(time.monotonic())
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await gathered(self, self.gather)
            if self.hold_s:
                await asyncio.sleep(self.hold_s)
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self.in_flight -= 1

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # -- test helpers ------------------------------------------------------------

    def script(self, *responses: Canned) -> None:
        with self._lock:
            self.canned.extend(responses)

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path == path)

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [r.body for r in self.requests if r.path == path]

    # -- handlers ----------------------------------------------------------------

    async def _log(self, request: web.Request) -> tuple[Any, web.Response | None]:
        try:
            body = await request.json()
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Logged(request.method, request.path, dict(request.headers), body))
            canned = None
            for i, c in enumerate(self.canned):
                if not c.paths or request.path in c.paths:
                    canned = c
                    del self.canned[i]
                    break
        if canned is not None:
            text = canned.body if isinstance(canned.body, str) else json.dumps(canned.body)
            return body, web.Response(status=canned.status, text=text, headers=canned.headers, content_type="application/json")
        return body, None

    async def _openai(self, request: web.Request) -> web.Response:
        body, canned = await self._log(request)
        if canned is not None:
            return canned
        if request.headers.get("Authorization") != f"Bearer {OPENAI_KEY}":
            # like the real API, the error quotes (part of) the key that was sent
            sent = request.headers.get("Authorization", "")
            return web.json_response(
                {"error": {"message": f"Incorrect API key provided: {sent}", "type": "invalid_request_error", "code": "invalid_api_key"}},
                status=401,
            )
        messages = body.get("messages") or []
        user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        prompt_tokens = sum(_words(str(m.get("content"))) for m in messages)
        tools = body.get("tools") or []
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if tools and "weather" in user.lower():
            name = tools[0]["function"]["name"]
            message["tool_calls"] = [
                {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps({"city": "Paris"})}}
            ]
            finish = "tool_calls"
            completion = 12
        else:
            message["content"] = answer_from_history(messages) or answer_for(user)
            signed = re.search(
                r"Sign every answer as (\S+?)\.", next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
            )
            if signed:  # the system prompt shows in the answer: a test sees which prompt each request was sent
                message["content"] += f" — {signed.group(1)}"
            completion = _words(message["content"])
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion,
                    "total_tokens": prompt_tokens + completion,
                    "prompt_tokens_details": {"cached_tokens": min(self.cached_tokens, prompt_tokens)},
                },
            }
        )

    async def _openai_embeddings(self, request: web.Request) -> web.Response:
        body, canned = await self._log(request)
        if canned is not None:
            return canned
        if request.headers.get("Authorization") != f"Bearer {OPENAI_KEY}":
            sent = request.headers.get("Authorization", "")  # quoted back, as the real API does
            return web.json_response({"error": {"message": f"Incorrect API key provided: {sent}", "code": "invalid_api_key"}}, status=401)
        texts = body.get("input") if isinstance(body, dict) else None
        texts = [texts] if isinstance(texts, str) else texts
        if not texts or not all(isinstance(t, str) and t for t in texts):
            return web.json_response({"error": {"message": "'$.input' is invalid: expected non-empty strings"}}, status=400)
        tokens = sum(_words(t) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": embedding_for(t)} for i, t in enumerate(texts)],
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _anthropic(self, request: web.Request) -> web.Response:
        body, canned = await self._log(request)
        if canned is not None:
            return canned
        if request.headers.get("x-api-key") != ANTHROPIC_KEY:
            return web.json_response(
                {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, status=401
            )
        if not request.headers.get("anthropic-version"):
            return web.json_response(
                {"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version header is required"}}, status=400
            )
        if "max_tokens" not in body or any(m.get("role") == "system" for m in body.get("messages") or []):
            return web.json_response(
                {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request shape"}}, status=400
            )
        messages = body["messages"]
        user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        tools = body.get("tools") or []
        content: list[dict[str, Any]] = []
        stop = "end_turn"
        if tools and "weather" in str(user).lower():
            content.append({"type": "text", "text": "Let me check the weather."})
            content.append({"type": "tool_use", "id": "toolu_1", "name": tools[0]["name"], "input": {"city": "Paris"}})
            stop = "tool_use"
        else:
            content.append({"type": "text", "text": answer_for(str(user))})
        return web.json_response(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": content,
                "stop_reason": stop,
                "usage": {"input_tokens": 20, "output_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0},
            }
        )

    async def _acme(self, request: web.Request) -> web.Response:
        body, canned = await self._log(request)
        if canned is not None:
            return canned
        if request.headers.get("X-Acme-Token") != "acme-secret-token-42":
            return web.json_response({"problem": "bad token"}, status=401)
        question = str((body or {}).get("query", ""))
        return web.json_response({"result": {"answer": answer_for(question)}, "meter": {"in": 7, "out": 3}})


def wait_for_port(port: int, host: str = "127.0.0.1", attempts: int = 500) -> None:
    """Block until ``host:port`` accepts a TCP connection (no sleeping guesses)."""
    last: OSError | None = None
    for _ in range(attempts):
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError as exc:
            last = exc
            threading.Event().wait(0.01)
    raise RuntimeError(f"port {port} never accepted connections: {last}")


# -- fixtures shared by the provider tests (import them into the test module) -------


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    s = FakeLLMServer().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Millisecond backoff, and no provider key or URL from the developer's environment."""
    monkeypatch.setenv("EVALX_BACKOFF_BASE_S", "0.001")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
