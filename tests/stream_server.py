"""A fake provider that streams its answers as OpenAI (``/v1/chat/completions``) and Anthropic (``/v1/messages``) do.

The request's ``model`` picks the scenario: ``text``, ``nousage``, ``tools``, ``badargs``, ``cut``, ``drop``, ``idle``,
``endless``, ``error``, ``empty``, ``echo-key`` (an error event quoting the key it got), ``whole`` (a plain
JSON answer, as a server that ignores ``stream`` gives). Every request is logged with its body and headers.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web

ANSWER = ["The capital", " of France", " is Paris", "."]
TEXT = "".join(ANSWER)
#: a tool call's arguments, sent in pieces this small
ARGS = '{"city": "Paris", "units": "metric"}'
OTHER_ARGS = '{"q": "weather"}'


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class StreamServer(ThreadedAioServer):
    thread_name = "stream-server"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self._waiting: set[asyncio.Task[Any]] = set()  # handlers that never answer, cancelled by stop()

    def stop(self) -> None:
        def cancel() -> None:
            for task in self._waiting:
                task.cancel()

        self._loop.call_soon_threadsafe(cancel)
        super().stop()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.openai)
        app.router.add_post("/v1/messages", self.anthropic)

    async def _start(self, request: web.Request) -> tuple[dict[str, Any], web.StreamResponse | None]:
        body = await request.json()
        self.requests.append({"path": request.path, "body": body, "headers": dict(request.headers)})
        if body.get("model") == "whole" or not body.get("stream"):
            return body, None
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return body, resp

    # -- OpenAI chat.completion.chunk -------------------------------------------

    async def openai(self, request: web.Request) -> web.StreamResponse:
        body, resp = await self._start(request)
        scenario = body["model"]
        if resp is None:
            return web.json_response(
                {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7},
                }
            )

        async def send(data: Any) -> None:
            text = data if isinstance(data, str) else json.dumps(data)
            await resp.write(f"data: {text}\n\n".encode())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        await send(chunk({"role": "assistant", "content": ""}))
        if scenario == "empty":
            await send("[DONE]")
            return resp
        if scenario == "echo-key":
            await send({"error": {"message": f"bad request from {request.headers.get('Authorization')}", "type": "invalid_request_error"}})
            return resp
        if scenario in ("tools", "badargs"):
            args = ARGS[:-3] if scenario == "badargs" else ARGS
            calls = [(0, "call_a", "get_weather", args), (1, "call_b", "search", OTHER_ARGS)]
            for index, call_id, name, text in calls:
                await send(
                    chunk(
                        {"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}
                    )
                )
                for piece in _pieces(text):
                    await send(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            await send(chunk({}, "tool_calls"))
        else:
            for n, piece in enumerate(ANSWER):
                await send(chunk({"content": piece}))
                if scenario == "cut" and n == 1:
                    return resp  # closed before [DONE]
                if scenario == "drop" and n == 1:
                    assert request.transport is not None
                    request.transport.abort()  # the connection dropped mid-stream: no chunked-encoding end
                    return resp
                if scenario == "error" and n == 1:
                    await send({"error": {"message": "the model crashed", "type": "server_error"}})
                    return resp
                if scenario == "idle" and n == 1:
                    task = asyncio.current_task()
                    assert task is not None
                    self._waiting.add(task)
                    await asyncio.Event().wait()  # never another byte
                if scenario == "endless" and n == 1:
                    while True:  # a comment now and then: never idle, never ends
                        await resp.write(b": keep-alive\n\n")
                        await asyncio.sleep(0.01)
            await send(chunk({}, "stop"))
        include = (body.get("stream_options") or {}).get("include_usage")
        if include and scenario != "nousage":
            await send(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                }
            )
        await send("[DONE]")
        return resp

    # -- Anthropic typed events -------------------------------------------------

    async def anthropic(self, request: web.Request) -> web.StreamResponse:
        body, resp = await self._start(request)
        scenario = body["model"]
        if resp is None:
            return web.json_response(
                {
                    "type": "message",
                    "content": [{"type": "text", "text": TEXT}],
                    "stop_reason": "end_turn",
                    "usage": {"input_tokens": 11, "output_tokens": 7},
                }
            )

        async def send(kind: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode())

        usage = {"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 0}
        await send(
            "message_start",
            {"message": {"id": "msg_1", "role": "assistant", "content": [], "usage": usage if scenario != "nousage" else {}}},
        )
        await send("ping", {})
        if scenario == "error":
            await send("error", {"error": {"type": "overloaded_error", "message": "Overloaded"}})
            return resp
        await send("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        for n, piece in enumerate(ANSWER):
            await send("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}})
            if scenario == "cut" and n == 1:
                return resp
        await send("content_block_stop", {"index": 0})
        stop = "end_turn"
        if scenario in ("tools", "badargs"):
            args = ARGS[:-3] if scenario == "badargs" else ARGS
            await send(
                "content_block_start",
                {"index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
            )
            for piece in _pieces(args):
                await send("content_block_delta", {"index": 1, "delta": {"type": "input_json_delta", "partial_json": piece}})
            await send("content_block_stop", {"index": 1})
            stop = "tool_use"
        delta_usage = {"output_tokens": 7} if scenario != "nousage" else {}
        await send("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": delta_usage})
        await send("message_stop", {})
        return resp
