"""A scripted HTTP server for tests: each path answers what the test put under its name (aiohttp.web in a thread).

``POST /{name}/v1/chat/completions`` and ``POST /{name}/v1/messages`` answer
``answers[name]``: a mapping or list is sent as JSON with HTTP 200 (``NaN``
and ``Infinity`` as Python writes them), raw ``bytes`` as they are (JSON
content type), a ``(status, body)`` pair with that status. ``POST
/{name}/execute`` answers ``answers[name]`` as Server-Sent Events: a list of
``(event, data)`` pairs (data: JSON-encoded unless a str). An answer may be
a callable: it gets the request's JSON body and returns the answer.
A name with no answer gets a small OpenAI answer that echoes the request's
``X-Route`` header (``route=alpha``), usage included.

:attr:`ScriptedServer.hits` counts requests per name; :attr:`requests` keeps
each request's name, headers and body.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web


def openai_answer(text: str, *, finish_reason: str | None = "stop", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """An OpenAI chat completion with ``text``; ``usage`` None leaves usage out."""
    answer: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
    }
    if usage is not None:
        answer["usage"] = usage
    return answer


class ScriptedServer(ThreadedAioServer):
    thread_name = "scripted-server"

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.hits: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    def start(self) -> ScriptedServer:
        super().start()
        return self

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{name}/v1/chat/completions", self._json)
        app.router.add_post("/{name}/v1/messages", self._json)
        app.router.add_post("/{name}/execute", self._sse)

    async def _record(self, request: web.Request) -> str:
        name = request.match_info["name"]
        self.hits[name] += 1
        body = await request.read()
        self.requests.append({"name": name, "headers": dict(request.headers), "body": body.decode("utf-8", "replace")})
        return name

    def _scripted(self, name: str) -> Any:
        answer = self.answers.get(name)
        if callable(answer):
            answer = answer(json.loads(self.requests[-1]["body"] or "null"))
        return answer

    async def _json(self, request: web.Request) -> web.Response:
        name = await self._record(request)
        answer = self._scripted(name)
        if answer is None:
            usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
            answer = openai_answer(f"route={request.headers.get('X-Route')}", usage=usage)
        status = 200
        if isinstance(answer, tuple):
            status, answer = answer
        body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        return web.Response(status=status, body=body, content_type="application/json")

    async def _sse(self, request: web.Request) -> web.Response:
        name = await self._record(request)
        events = self._scripted(name) or [("text_delta", {"text": "hello"}), ("done", {})]
        chunks = []
        for event, data in events:
            text = data if isinstance(data, str) else json.dumps(data)
            chunks.append(f"event: {event}\ndata: {text}\n\n")
        return web.Response(body="".join(chunks).encode(), content_type="text/event-stream")
