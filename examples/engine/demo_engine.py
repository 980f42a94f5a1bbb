"""A tiny demo agent Engine: ``POST /execute`` streams its run back as Server-Sent Events.

    python examples/engine/demo_engine.py --port 8000

It "answers" a few questions with canned tool calls (web_search, calculator,
read_file), streaming the events an agent Engine sends: ``iteration``,
``tool_call``, ``tool_result``, ``text_delta``, ``usage``, ``done`` (or
``error``). If ENGINE_KEY is set (or ``--key`` given), requests must carry
it in ``X-Engine-Key``. Needs only aiohttp (installed with evalx).

Conversations (a case with ``turns:``): a request with a ``turn`` is one turn
of the conversation named by its ``task_id``; the engine keeps what it was
told ("my order number is 123") and answers from it later ("what is my order
number?"). ``turn: 1`` starts the conversation afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from typing import Any

from aiohttp import web

CAPITALS = {"france": "Paris", "japan": "Tokyo", "italy": "Rome", "kenya": "Nairobi"}
FILES = {"refunds.md": "Refunds are accepted within 30 days of purchase, with the receipt."}


def plan(message: str) -> tuple[list[tuple[str, dict[str, Any], str]], str]:
    """(tool calls with their results, final answer) for a question."""
    text = message.lower()
    if m := re.search(r"(-?\d+(?:\.\d+)?)\s*([-+*/x×])\s*(-?\d+(?:\.\d+)?)", text):
        a, op, b = float(m.group(1)), m.group(2), float(m.group(3))
        value = {"+": a + b, "-": a - b, "*": a * b, "x": a * b, "×": a * b, "/": a / b if b else float("nan")}[op]
        shown = int(value) if value == int(value) else round(value, 4)
        return [("calculator", {"expression": m.group(0)}, str(shown))], f"{m.group(0)} = {shown}."
    for country, capital in CAPITALS.items():
        if country in text:
            return [("web_search", {"query": f"capital of {country}"}, f"{capital} is the capital of {country.title()}.")], (
                f"The capital of {country.title()} is {capital}."
            )
    if "refund" in text:
        return [("read_file", {"path": "policies/refunds.md"}, FILES["refunds.md"])], (
            "You can get a refund within 30 days of purchase if you keep the receipt."
        )
    if "weather" in text:
        return [("web_search", {"query": message}, "Sunny, 21°C")], "It is sunny and 21°C."
    return [], "I can answer arithmetic, capitals, weather and refund questions."


def remember(memory: dict[str, str], message: str) -> str | None:
    """In a conversation: store what the user tells ("my X is Y"), answer "what is my X?" from it; None otherwise."""
    text = message.lower()
    if asked := re.search(r"what(?: is|'s) my ([a-z][a-z ]*?)\s*\?", text):
        name = asked.group(1)
        return f"Your {name} is {memory[name]}." if name in memory else f"You have not told me your {name} yet."
    told = re.findall(r"my ([a-z][a-z ]*?) is ([\w-]+)", text)
    memory.update(told)
    return None


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def make_app(key: str | None, delay: float) -> web.Application:
    conversations: dict[str, dict[str, str]] = {}  # task_id -> what the user told in earlier turns

    async def execute(request: web.Request) -> web.StreamResponse:
        if key and request.headers.get("X-Engine-Key") != key:
            return web.json_response({"error": {"code": "UNAUTHORIZED", "message": "bad or missing X-Engine-Key"}}, status=401)
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": {"message": "the body must be JSON"}}, status=400)
        message = str(body.get("message", ""))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
        await resp.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await resp.write(sse(event, data))
            if delay:
                await asyncio.sleep(delay)

        calls, answer = plan(message)
        turn = body.get("turn")
        if isinstance(turn, int):  # one turn of a conversation: the engine keeps its state under task_id
            tid = str(body.get("task_id"))
            if turn == 1 or tid not in conversations:
                conversations[tid] = {}
            recalled = remember(conversations[tid], message)
            if recalled is not None:
                calls, answer = [], recalled
            elif not calls and conversations[tid]:
                answer = "Noted."
        await send("iteration", {"iteration": 1, "task_id": body.get("task_id")})
        for i, (tool, args, result) in enumerate(calls):
            await send("tool_call", {"id": f"call_{i}", "tool": tool, "args": args})
            await send("tool_result", {"id": f"call_{i}", "tool": tool, "result": result})
        if calls:
            await send("iteration", {"iteration": 2})
        for word in re.findall(r"\S+\s*", answer):
            await send("text_delta", {"text": word})
        words = len(message.split()) + sum(len(str(r).split()) for _, _, r in calls)
        await send("usage", {"input_tokens": 50 + 2 * words, "output_tokens": 2 * len(answer.split()), "cache_hit_tokens": 32})
        await send("done", {"status": "complete"})
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/execute", execute)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="A tiny demo agent Engine for evalx.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--key", default=os.environ.get("ENGINE_KEY"), help="required X-Engine-Key (default: $ENGINE_KEY)")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between streamed events")
    args = parser.parse_args()

    async def serve() -> None:
        runner = web.AppRunner(make_app(args.key, args.delay), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, args.host, args.port).start()
        print(f"demo engine listening on http://{args.host}:{args.port} (POST /execute)", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
