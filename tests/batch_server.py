"""Fake OpenAI and Anthropic batch APIs on 127.0.0.1, following the public shapes, for the batch-mode tests.

OpenAI: ``POST /v1/files`` (multipart, purpose=batch, a JSONL of ``{custom_id, method, url, body}``),
``POST /v1/batches`` ``{input_file_id, endpoint, completion_window}``, ``GET /v1/batches/{id}`` (validating →
in_progress → completed, ``request_counts``, ``output_file_id``/``error_file_id``), ``GET /v1/files/{id}/content``
(JSONL: ``{id, custom_id, response: {status_code, request_id, body}, error}``). Anthropic: ``POST /v1/messages/batches``
``{requests: [{custom_id, params}]}``, ``GET /v1/messages/batches/{id}`` (``processing_status`` in_progress → ended,
``request_counts``, ``results_url``), ``GET {results_url}`` (JSONL: ``{custom_id, result: {type: succeeded|errored|
canceled|expired, ...}}``). Both also answer normal calls (``/v1/chat/completions``, ``/v1/messages``), counted.

A prompt holding ``EXPIRE`` expires in its batch, one holding ``BADREQ`` errors (HTTP 400, invalid request), one
holding ``HUGE`` is answered with 3 MB; any other is answered ``ANSWER: <prompt>`` with 1,000 input and 100 output tokens. A judge prompt (it holds
``<output``) is answered with a PASS verdict. ``hold`` keeps batches in progress.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any

from aiohttp import web

from tests.aio_server import ThreadedAioServer

INPUT_TOKENS, OUTPUT_TOKENS = 1000, 100
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def _prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    last = messages[-1]["content"] if messages else ""
    return last if isinstance(last, str) else json.dumps(last)


def _reply(prompt: str) -> str:
    if "<output" in prompt or "verdict" in prompt.lower():  # a judge prompt
        return 'The answer is right.\n{"pass": true, "score": 1.0, "reason": "fine"}'
    if "HUGE" in prompt:  # an answer of 3 MB
        return f"ANSWER: {prompt} " + "H" * 3_000_000
    return f"ANSWER: {prompt}"


class BatchServer(ThreadedAioServer):
    thread_name = "batch-server"

    def __init__(self, kind: str, *, polls_to_finish: int = 1) -> None:
        super().__init__()
        self.kind = kind
        self.lock = threading.Lock()
        self.hold = threading.Event()  # set: batches stay in progress
        self.polls_to_finish = polls_to_finish
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.requests_of: dict[str, list[dict[str, Any]]] = {}
        self.creations = 0
        self.polls = 0
        self.normal_calls = 0
        self.batched_requests = 0
        self.problems: list[str] = []
        self._ids = itertools.count(1)

    # -- shared ------------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def _check_auth(self, request: web.Request) -> None:
        if self.kind == "openai":
            if request.headers.get("Authorization") != "Bearer sk-test":
                self.problems.append(f"no key on {request.path}")
        elif request.headers.get("x-api-key") != "sk-test" or not request.headers.get("anthropic-version"):
            self.problems.append(f"no key or version on {request.path}")

    def _outcome(self, body: dict[str, Any]) -> str:
        prompt = _prompt(body)
        return "expired" if "EXPIRE" in prompt else "errored" if "BADREQ" in prompt else "succeeded"

    def routes(self, app: web.Application) -> None:
        if self.kind == "openai":
            app.router.add_post("/v1/files", self.upload)
            app.router.add_post("/v1/batches", self.create_openai)
            app.router.add_get("/v1/batches/{id}", self.status_openai)
            app.router.add_get("/v1/files/{id}/content", self.content)
            app.router.add_post("/v1/chat/completions", self.chat)
        else:
            app.router.add_post("/v1/messages/batches", self.create_anthropic)
            app.router.add_get("/v1/messages/batches/{id}", self.status_anthropic)
            app.router.add_get("/v1/messages/batches/{id}/results", self.results_anthropic)
            app.router.add_post("/v1/messages", self.messages)

    def _finishes(self, batch: dict[str, Any]) -> bool:
        batch["_polls"] += 1
        return not self.hold.is_set() and batch["_polls"] >= self.polls_to_finish

    # -- OpenAI --------------------------------------------------------------------------

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self._new_id("chatcmpl-"),
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": _reply(_prompt(body))}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS},
        }

    async def chat(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        body = await request.json()
        with self.lock:
            self.normal_calls += 1
        if "BADREQ" in _prompt(body):
            return web.json_response({"error": {"message": "bad request", "type": "invalid_request_error"}}, status=400)
        return web.json_response(self._completion(body))

    async def upload(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        form = await request.post()
        if form.get("purpose") != "batch":
            return web.json_response({"error": {"message": "purpose must be batch"}}, status=400)
        field = form.get("file")
        data = field.file.read() if hasattr(field, "file") else b""
        file_id = self._new_id("file-")
        with self.lock:
            self.files[file_id] = data
        return web.json_response(
            {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()), "filename": "x.jsonl", "purpose": "batch"}
        )

    async def create_openai(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        body = await request.json()
        data = self.files.get(body.get("input_file_id", ""))
        if data is None or body.get("completion_window") != "24h" or body.get("endpoint") != "/v1/chat/completions":
            return web.json_response({"error": {"message": f"bad batch {body}"}}, status=400)
        lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
        ids = [line.get("custom_id") for line in lines]
        if len(set(ids)) != len(ids) or len(lines) > 50_000:
            return web.json_response({"error": {"message": "duplicate custom_id or too many requests"}}, status=400)
        for line in lines:
            if line.get("method") != "POST" or line.get("url") != body["endpoint"] or "model" not in line.get("body", {}):
                return web.json_response({"error": {"message": f"bad line {line}"}}, status=400)
        batch_id = self._new_id("batch_")
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "errors": None,
            "created_at": int(time.time()),
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "_polls": 0,
        }
        with self.lock:
            self.creations += 1
            self.batched_requests += len(lines)
            self.batches[batch_id] = batch
            self.requests_of[batch_id] = lines
        return web.json_response({k: v for k, v in batch.items() if not k.startswith("_")})

    async def status_openai(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response({"error": {"message": "no such batch"}}, status=404)
        with self.lock:
            self.polls += 1
            if batch["status"] != "completed":
                batch["status"] = "in_progress"
                if self._finishes(batch):
                    self._complete_openai(batch)
        return web.json_response({k: v for k, v in batch.items() if not k.startswith("_")})

    def _complete_openai(self, batch: dict[str, Any]) -> None:
        out, errors = [], []
        for line in self.requests_of[batch["id"]]:
            outcome = self._outcome(line["body"])
            rid = self._new_id("batch_req_")
            if outcome == "succeeded":
                out.append(
                    {
                        "id": rid,
                        "custom_id": line["custom_id"],
                        "response": {"status_code": 200, "request_id": rid, "body": self._completion(line["body"])},
                        "error": None,
                    }
                )
            elif outcome == "errored":
                body = {"error": {"message": "bad request in batch", "type": "invalid_request_error"}}
                errors.append(
                    {
                        "id": rid,
                        "custom_id": line["custom_id"],
                        "response": {"status_code": 400, "request_id": rid, "body": body},
                        "error": None,
                    }
                )
            else:
                error = {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}
                errors.append({"id": rid, "custom_id": line["custom_id"], "response": None, "error": error})
        batch["status"] = "completed"
        batch["request_counts"] = {"total": len(out) + len(errors), "completed": len(out), "failed": len(errors)}
        if out:
            batch["output_file_id"] = self._new_id("file-")
            self.files[batch["output_file_id"]] = "".join(json.dumps(x) + "\n" for x in out).encode()
        if errors:
            batch["error_file_id"] = self._new_id("file-")
            self.files[batch["error_file_id"]] = "".join(json.dumps(x) + "\n" for x in errors).encode()

    async def content(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        data = self.files.get(request.match_info["id"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    # -- Anthropic ---------------------------------------------------------------------

    def _message(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self._new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": params.get("model"),
            "content": [{"type": "text", "text": _reply(_prompt(params))}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        }

    async def messages(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        body = await request.json()
        with self.lock:
            self.normal_calls += 1
        if "BADREQ" in _prompt(body):
            return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": "bad request"}}, status=400)
        return web.json_response(self._message(body))

    async def create_anthropic(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        body = await request.json()
        requests = body.get("requests") or []
        ids = [r.get("custom_id") for r in requests]
        bad = [i for i in ids if not isinstance(i, str) or not _CUSTOM_ID.match(i)]
        if not requests or bad or len(set(ids)) != len(ids) or len(requests) > 100_000:
            return web.json_response(
                {"type": "error", "error": {"type": "invalid_request_error", "message": f"bad requests {bad[:3]}"}}, status=400
            )
        for r in requests:
            params = r.get("params") or {}
            if not all(k in params for k in ("model", "max_tokens", "messages")):
                return web.json_response({"type": "error", "error": {"type": "invalid_request_error", "message": "bad params"}}, status=400)
        batch_id = self._new_id("msgbatch_")
        batch = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
            "ended_at": None,
            "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z",
            "cancel_initiated_at": None,
            "results_url": None,
            "_polls": 0,
        }
        with self.lock:
            self.creations += 1
            self.batched_requests += len(requests)
            self.batches[batch_id] = batch
            self.requests_of[batch_id] = requests
        return web.json_response({k: v for k, v in batch.items() if not k.startswith("_")})

    async def status_anthropic(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return web.json_response({"type": "error", "error": {"type": "not_found_error", "message": "no such batch"}}, status=404)
        with self.lock:
            self.polls += 1
            if batch["processing_status"] != "ended" and self._finishes(batch):
                counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
                for r in self.requests_of[batch["id"]]:
                    counts[self._outcome(r["params"])] += 1
                batch.update(
                    processing_status="ended",
                    request_counts=counts,
                    ended_at="2026-01-01T01:00:00Z",
                    results_url=f"{self.url}/v1/messages/batches/{batch['id']}/results",
                )
        return web.json_response({k: v for k, v in batch.items() if not k.startswith("_")})

    async def results_anthropic(self, request: web.Request) -> web.Response:
        self._check_auth(request)
        batch = self.batches.get(request.match_info["id"])
        if batch is None or batch["processing_status"] != "ended":
            return web.json_response({"type": "error", "error": {"type": "not_found_error", "message": "no results yet"}}, status=404)
        lines = []
        for r in self.requests_of[batch["id"]]:
            outcome = self._outcome(r["params"])
            if outcome == "succeeded":
                result: dict[str, Any] = {"type": "succeeded", "message": self._message(r["params"])}
            elif outcome == "errored":
                result = {
                    "type": "errored",
                    "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad request in batch"}},
                }
            else:
                result = {"type": "expired"}
            lines.append(json.dumps({"custom_id": r["custom_id"], "result": result}) + "\n")
        return web.Response(body="".join(lines).encode(), content_type="application/binary")
