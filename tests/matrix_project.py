"""A fake OpenAI server that answers by question and temperature, and a project whose matrix runs Python and provider targets on it.

Shared by the matrix tests (tests/config/test_matrix.py) and the merge of matrix shards (tests/execution/test_merge.py).
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import threading
from pathlib import Path
from typing import Any


class FakeOpenAI:
    """An OpenAI-compatible chat server on 127.0.0.1: right at temperature 0, wrong about refunds above it."""

    ANSWERS = {"2 + 2": "It is 4.", "refund": "Refunds are possible within 30 days."}

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        from aiohttp import web

        async def chat(request: web.Request) -> web.Response:
            body = await request.json()
            self.requests.append(body)
            question = body["messages"][-1]["content"]
            answer = next((a for k, a in self.ANSWERS.items() if k in question), "I don't know.")
            if "refund" in question and body.get("temperature", 0) > 0:
                answer = "No idea, sorry."
            return web.json_response(
                {
                    "id": "x",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            )

        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(runner.setup())
        self.loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def start(self) -> FakeOpenAI:
        self.thread.start()
        self.ready.wait(10)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5):  # the port accepts connections
            pass
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


AGENTS = """\
import threading
from collections import Counter

_calls = Counter()
_lock = threading.Lock()


def stable(question, case):
    return {"arithmetic": "It is 4.", "refund": "Refunds are possible within 30 days."}[case["id"]]


def flaky(question, case):
    # the refund case is right on 3 of every 4 calls: 3/4 with --repeat 4, in any order
    with _lock:
        n = _calls[case["id"]]
        _calls[case["id"]] += 1
    if case["id"] == "refund" and n % 4 == 3:
        return "Hmm."
    return stable(question, case)
"""


def provider_project(tmp_path: Path, server: FakeOpenAI) -> Path:
    (tmp_path / "agents.py").write_text(AGENTS)
    path = tmp_path / "evalconfig.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: matrix-e2e
            defaults: {{targets: [stable], concurrency: 4, retries: 0}}
            targets:
              - {{id: stable, type: python, callable: agents.py:stable}}
              - {{id: flaky, type: python, callable: agents.py:flaky}}
              - id: mini
                type: provider
                provider: openai
                model: local-model
                base_url: {server.url}/v1
                api_key: sk-test-not-a-real-key-123456
                pricing: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}
                params: {{temperature: 0}}
                prompt: "{{{{ case.input }}}}"
            matrix:
              targets: [stable, flaky, mini]
              params:
                temperature: [0, 0.7]
            datasets:
              - id: qa
                cases:
                  - {{id: arithmetic, input: "What is 2 + 2?", assert: [{{type: contains, value: "4"}}]}}
                  - {{id: refund, input: "How long for a refund?", assert: [{{type: contains, value: "30 days"}}]}}
            """
        ),
        encoding="utf-8",
    )
    return path
