"""A scripted agent Engine for tests: a real HTTP server on 127.0.0.1 (aiohttp.web in a thread).

``POST /execute`` streams Server-Sent Events. What it does is driven by the
request body, so one server covers every case of a run:

- ``scenario`` (a body key), or a ``message`` that starts with ``script:NAME``
  picks a behaviour from :data:`SCENARIOS` (default ``normal``);
- in ``normal`` runs, body keys ``tools`` (names to call), ``answer`` and
  ``output_tokens`` shape the run; without them a string message is answered
  by keyword (``weather`` calls web_search, ``delete`` calls delete_file,
  ``read`` calls read_file);
- ``retry_after`` sets the wait the 429 and rate-limit scenarios ask for.

Conversations: a body with a ``turn`` (1-based) is one turn of the
conversation named by its ``task_id``. The server keeps each conversation
(:attr:`EngineServer.conversations`: its messages and the facts told): turn 1
starts it afresh, turn N must follow turn N-1 (a repeated number replaces that
turn, as a retry does; anything else is HTTP 409). In a conversation "my
order number is 12345" is remembered and "what is my order number?" answered
from it, "which turn is this?" answered with the turn count.

Scenarios that fail "then succeed" count attempts per ``task_id``. With a
``key``, a request without the right ``X-Engine-Key`` gets 401. Every request
(path, headers, body) is recorded in :attr:`EngineServer.requests`;
:attr:`EngineServer.peak_in_flight` is the most requests it answered at once
(reset it before a run that measures it).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aio_server import ThreadedAioServer, gathered
from aiohttp import web

NASTY = 'ANSI \x1b[31mred\x1b[0m, NUL \x00 byte, CDATA end ]]> and <b>markup</b> & "quotes"'

Handler = Callable[["Call"], Awaitable[web.StreamResponse]]
SCENARIOS: dict[str, Handler] = {}


def scenario(name: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        SCENARIOS[name] = fn
        return fn

    return register


def sse(event: str | None, data: Any, *, eol: str = "\n", event_id: str | None = None) -> str:
    lines = []
    if event:
        lines.append(f"event: {event}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    payload = data if isinstance(data, str) else json.dumps(data)
    lines += [f"data: {part}" for part in payload.split("\n")]
    return eol.join(lines) + eol + eol


class Call:
    """One request being answered."""

    def __init__(self, server: EngineServer, request: web.Request, body: dict[str, Any]) -> None:
        self.server = server
        self.request = request
        self.body = body
        self.task_id = str(body.get("task_id", ""))
        message = body.get("message")
        self.message = message if isinstance(message, str) else ""
        server.attempts[self.task_id] += 1
        self.attempt = server.attempts[self.task_id]
        self.response: web.StreamResponse | None = None
        turn = body.get("turn")
        self.turn = turn if isinstance(turn, int) and not isinstance(turn, bool) else None
        self.conversation: dict[str, Any] | None = None

    async def open(self) -> web.StreamResponse:
        self.response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await self.response.prepare(self.request)
        return self.response

    async def write(self, text: str) -> None:
        assert self.response is not None
        await self.response.write(text.encode("utf-8"))

    async def end(self) -> web.StreamResponse:
        assert self.response is not None
        await self.response.write_eof()
        return self.response

    def closed(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def plan(self) -> tuple[list[str], str, dict[str, int]]:
        """Tools to call, the answer and the usage of a normal run."""
        tools = self.body.get("tools")
        answer = self.body.get("answer")
        text = self.message.lower()
        if answer is None and self.conversation is not None:
            answer = self.remembered(text)
        if tools is None:
            tools = [t for word, t in (("weather", "web_search"), ("delete", "delete_file"), ("read", "read_file")) if word in text]
        if answer is None:
            if "weather" in text:
                answer = "It is sunny in Paris, 21°C."
            elif "delete" in text:
                answer = "I deleted the file."
            elif "read" in text:
                answer = "The file says hello."
            else:
                answer = f"You said: {self.message or json.dumps(self.body, sort_keys=True)}"
        usage = {"input_tokens": 100, "output_tokens": int(self.body.get("output_tokens", 20)), "cache_hit_tokens": 40}
        return list(tools), str(answer), usage

    def remembered(self, text: str) -> str | None:
        """In a conversation: an answer from what earlier turns told (None: answer as usual)."""
        assert self.conversation is not None
        facts: dict[str, str] = self.conversation["facts"]
        asked = re.search(r"what is my ([a-z][a-z ]*?)\s*\?", text)
        if asked:
            name = asked.group(1)
            return f"Your {name} is {facts[name]}." if name in facts else f"You have not told me your {name}."
        if "which turn" in text:
            return f"This is turn {self.turn} of our conversation."
        told = re.findall(r"my ([a-z][a-z ]*?) is (\w+)", text)
        if told:
            facts.update(told)
            return "Noted: " + ", ".join(f"{name} {value}" for name, value in told) + "."
        return None

    async def normal_events(self, *, eol: str = "\n") -> None:
        tools, answer, usage = self.plan()
        await self.write(sse("iteration", {"iteration": 1}, eol=eol))
        for i, tool in enumerate(tools):
            await self.write(sse("tool_call", {"tool": tool, "args": {"query": self.message}, "id": f"c{i}"}, eol=eol))
            await self.write(sse("tool_result", {"tool": tool, "result": f"{tool} ok", "id": f"c{i}"}, eol=eol))
        if tools:
            await self.write(sse("iteration", {"iteration": 2}, eol=eol))
        half = len(answer) // 2
        for part in (answer[:half], answer[half:]):
            if part:
                await self.write(sse("text_delta", {"text": part}, eol=eol))
        split = {k: v // 2 for k, v in usage.items()}
        await self.write(sse("usage", split, eol=eol))
        await self.write(sse("usage", {k: v - split[k] for k, v in usage.items()}, eol=eol))
        await self.write(sse("done", {"status": "complete"}, eol=eol))


class EngineServer(ThreadedAioServer):
    thread_name = "engine-server"

    def __init__(self, *, key: str | None = None) -> None:
        self.key = key
        self.requests: list[dict[str, Any]] = []
        self.attempts: Counter[str] = Counter()
        self.in_flight = 0
        self.peak_in_flight = 0
        #: task_id -> {"messages": [message of turn 1, 2...], "facts": {name: value}}
        self.conversations: dict[str, dict[str, Any]] = {}
        super().__init__()

    def start(self) -> EngineServer:
        super().start()
        return self

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/execute", self._execute)

    # -- queries for tests
    def requests_for(self, run_id: str) -> list[dict[str, Any]]:
        return [r for r in list(self.requests) if run_id in str(r["body"].get("task_id", ""))]

    def turns_sent(self, run_id: str) -> list[tuple[str, int | None, str]]:
        """(task_id, turn, message) of each request of a run, in the order received."""
        return [
            (str(r["body"].get("task_id")), r["body"].get("turn"), str(r["body"].get("message", ""))) for r in self.requests_for(run_id)
        ]

    def _follow(self, call: Call) -> str | None:
        """Record a conversation turn; an error line when it does not follow the previous one."""
        assert call.turn is not None
        if call.turn == 1:
            self.conversations[call.task_id] = {"messages": [], "facts": {}}
        conversation = self.conversations.get(call.task_id)
        if conversation is None:
            return f"turn {call.turn} of unknown conversation {call.task_id!r}"
        messages = conversation["messages"]
        if call.turn == len(messages):  # the same turn again (a retry): replaces it
            messages.pop()
        elif call.turn != len(messages) + 1:
            return f"turn {call.turn} out of order: conversation {call.task_id!r} is at turn {len(messages)}"
        messages.append(call.message)
        call.conversation = conversation
        return None

    # -- the endpoint
    async def _execute(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.json_response({"error": "body is not JSON"}, status=400)
        self.requests.append({"path": request.path, "headers": dict(request.headers), "body": body})
        if self.key is not None and request.headers.get("X-Engine-Key") != self.key:
            return web.json_response({"error": {"message": "invalid engine key"}}, status=401)
        call = Call(self, request, body if isinstance(body, dict) else {"message": body})
        if call.turn is not None:
            wrong = self._follow(call)
            if wrong is not None:
                return web.json_response({"error": {"message": wrong}}, status=409)
        name = body.get("scenario") if isinstance(body, dict) else None
        if not name and call.message.startswith("script:"):
            name = call.message[len("script:") :].split()[0]
        handler = SCENARIOS.get(str(name or "normal"))
        if handler is None:
            return web.json_response({"error": f"unknown scenario {name!r}"}, status=422)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await handler(call)
        finally:
            self.in_flight -= 1


# ---------------------------------------------------------------- scenarios


@scenario("normal")
async def normal(call: Call) -> web.StreamResponse:
    await call.open()
    await call.normal_events()
    return await call.end()


@scenario("hold")
async def hold(call: Call) -> web.StreamResponse:
    """A normal run that starts answering after ``hold_s`` seconds (body key, default 0.2).

    With ``gather: N`` it first waits until N requests have been in flight at
    once (aio_server.gathered), so a test of a concurrency limit sees the full
    peak however slowly a loaded machine sends the requests.
    """
    await gathered(call.server, int(call.body.get("gather", 0)))
    await asyncio.sleep(float(call.body.get("hold_s", 0.2)))
    return await normal(call)


@scenario("echo")
async def echo(call: Call) -> web.StreamResponse:
    """Answer with the request body as JSON (for body-template tests)."""
    await call.open()
    await call.write(sse("text_delta", {"text": json.dumps(call.body, sort_keys=True)}))
    await call.write(sse("done", {}))
    return await call.end()


@scenario("multiline")
async def multiline(call: Call) -> web.StreamResponse:
    """Data split over several data: lines (joined with \\n), a type taken from the data, no event: field."""
    await call.open()
    await call.write('event: text_delta\ndata: {"text":\ndata:  "first line\\n"}\n\n')
    await call.write('data: {"type": "text_delta", "text": "second line"}\n\n')
    await call.write('event: tool_call\ndata: {"name": "web_search",\ndata: "args": {"q": "x"}}\n\n')
    await call.write("event: done\ndata: {}\n\n")
    return await call.end()


@scenario("comments")
async def comments(call: Call) -> web.StreamResponse:
    """Comment lines, id: and retry: fields, an unknown field, an event with no data (not dispatched)."""
    await call.open()
    await call.write(": keep-alive\n\nretry: 3000\n\n")
    await call.write(': a comment inside an event\nid: 7\nevent: text_delta\nfoo: ignored\ndata:{"text": "hello "}\n\n')
    await call.write("event: text_delta\n\n")  # no data: nothing is dispatched
    await call.write('id: 8\nevent: text_delta\ndata: {"text": "world"}\n\n: bye\n\n')
    await call.write("event: done\ndata:\n\n")
    return await call.end()


@scenario("crlf")
async def crlf(call: Call) -> web.StreamResponse:
    await call.open()
    await call.normal_events(eol="\r\n")
    return await call.end()


@scenario("cr")
async def cr(call: Call) -> web.StreamResponse:
    await call.open()
    await call.normal_events(eol="\r")
    return await call.end()


@scenario("chunked")
async def chunked(call: Call) -> web.StreamResponse:
    """Events cut into 3-byte network chunks, CRLF pairs split, small pauses between."""
    await call.open()
    text = "".join(
        [
            sse("tool_call", {"tool": "web_search", "args": {"q": "é"}}, eol="\r\n"),
            sse("text_delta", {"text": "split ✓ across chunks"}, eol="\r\n"),
            sse("usage", {"input_tokens": 5, "output_tokens": 7}, eol="\r\n"),
            sse("done", {}, eol="\r\n"),
        ]
    ).encode("utf-8")
    assert call.response is not None
    for i in range(0, len(text), 3):  # also splits multi-byte UTF-8 characters
        await call.response.write(text[i : i + 3])
        await asyncio.sleep(0.002)
    return await call.end()


@scenario("status")
async def status(call: Call) -> web.StreamResponse:
    """Answer with HTTP ``code`` (body key) and a JSON error."""
    code = int(call.body.get("code", 500))
    return web.json_response({"error": {"message": f"scripted failure {code}"}}, status=code)


@scenario("flaky500")
async def flaky500(call: Call) -> web.StreamResponse:
    """HTTP 500 for the first ``failures`` attempts of a task, then a normal run."""
    if call.attempt <= int(call.body.get("failures", 1)):
        return web.json_response({"error": {"message": "engine overloaded"}}, status=500)
    return await normal(call)


@scenario("rate429")
async def rate429(call: Call) -> web.StreamResponse:
    """HTTP 429 with Retry-After on the first attempt, then a normal run."""
    if call.attempt == 1:
        headers = {"Retry-After": str(call.body.get("retry_after", "0.05"))}
        return web.json_response({"error": {"message": "slow down"}}, status=429, headers=headers)
    return await normal(call)


@scenario("llm_rate_limited")
async def llm_rate_limited(call: Call) -> web.StreamResponse:
    """An LLM_RATE_LIMITED error event (after a tool call, before any text) on the first attempt."""
    await call.open()
    if call.attempt == 1:
        await call.write(sse("tool_call", {"tool": "web_search"}))
        await call.write(sse("error", {"code": "LLM_RATE_LIMITED", "message": "provider rate limit", "retry_after": 0.05}))
        return await call.end()
    await call.normal_events()
    return await call.end()


@scenario("rate_limited_after_text")
async def rate_limited_after_text(call: Call) -> web.StreamResponse:
    await call.open()
    await call.write(sse("text_delta", {"text": "partial"}))
    await call.write(sse("error", {"code": "LLM_RATE_LIMITED", "message": "provider rate limit"}))
    return await call.end()


@scenario("error_event")
async def error_event(call: Call) -> web.StreamResponse:
    await call.open()
    await call.write(sse("text_delta", {"text": "working"}))
    await call.write(sse("error", {"code": "TOOL_FAILED", "message": "the sandbox\ncrashed"}))
    return await call.end()


@scenario("idle")
async def idle(call: Call) -> web.StreamResponse:
    """One event, then silence until the client gives up."""
    await call.open()
    await call.write(sse("text_delta", {"text": "thinking"}))
    for _ in range(1200):
        if call.closed():
            break
        await asyncio.sleep(0.05)
    return call.response  # type: ignore[return-value]


@scenario("early_close")
async def early_close(call: Call) -> web.StreamResponse:
    """A clean end of the response before the done event."""
    await call.open()
    await call.write(sse("text_delta", {"text": "half an ans"}))
    return await call.end()


@scenario("mid_event_close")
async def mid_event_close(call: Call) -> web.StreamResponse:
    """The response ends in the middle of an event (no blank line after it)."""
    await call.open()
    await call.write(sse("text_delta", {"text": "ok"}))
    await call.write('event: text_delta\ndata: {"text": "cut')
    return await call.end()


@scenario("abort")
async def abort(call: Call) -> web.StreamResponse:
    """The connection drops in the middle of the chunked body."""
    await call.open()
    await call.write(sse("text_delta", {"text": "about to crash"}))
    assert call.request.transport is not None
    call.request.transport.close()
    return call.response  # type: ignore[return-value]


@scenario("empty")
async def empty(call: Call) -> web.StreamResponse:
    await call.open()
    return await call.end()


@scenario("malformed")
async def malformed(call: Call) -> web.StreamResponse:
    await call.open()
    await call.write(sse("text_delta", {"text": "fine"}))
    await call.write('event: tool_call\ndata: {"tool": "web_search", args: oops}\n\n')
    await call.write(sse("done", {}))
    return await call.end()


@scenario("slow")
async def slow(call: Call) -> web.StreamResponse:
    """Keeps streaming (never idle) for far longer than any test's cell timeout."""
    await call.open()
    for _ in range(1200):
        if call.closed():
            break
        try:
            await call.write(sse("text_delta", {"text": "."}))
        except (ConnectionError, RuntimeError):
            break
        await asyncio.sleep(0.05)
    return call.response  # type: ignore[return-value]


@scenario("many")
async def many(call: Call) -> web.StreamResponse:
    """``count`` text deltas: more events than a target keeps."""
    await call.open()
    await call.write("".join(sse("text_delta", {"text": "x"}) for _ in range(int(call.body.get("count", 50)))))
    await call.write(sse("done", {}))
    return await call.end()


@scenario("nasty")
async def nasty(call: Call) -> web.StreamResponse:
    """An answer full of what XML and terminals hate."""
    await call.open()
    await call.write(sse("tool_call", {"tool": "web_search", "args": {"q": NASTY}}))
    await call.write(sse("text_delta", {"text": NASTY}))
    await call.write(sse("done", {}))
    return await call.end()


@scenario("json_answer")
async def json_answer(call: Call) -> web.StreamResponse:
    return web.json_response({"text": "not a stream"})


@scenario("leak")
async def leak(call: Call) -> web.StreamResponse:
    """A careless engine that echoes the key it received: in text, in a tool call, then in an error."""
    key = call.request.headers.get("X-Engine-Key", "")
    await call.open()
    await call.write(sse("tool_call", {"tool": "debug", "args": {"key": key}}))
    await call.write(sse("text_delta", {"text": f"your key is {key}"}))
    if call.body.get("then_error"):
        await call.write(sse("error", {"code": "AUTH_DEBUG", "message": f"key {key} looks odd"}))
    else:
        await call.write(sse("done", {}))
    return await call.end()
