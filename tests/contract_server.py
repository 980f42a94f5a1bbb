"""A scripted fake provider for the provider contract tests (tests/targets/test_provider_contracts_*.py).

Any path, any method: each request is logged (method, path, query, headers, JSON body) and answered with the next
scripted :class:`Answer` — a JSON body, or Server-Sent Events when ``events`` is set — else with the default answer.
:func:`run_cell` writes a one-target config for a shipped definition and runs it through the real CLI.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aio_server import ThreadedAioServer
from aiohttp import web
from click.testing import CliRunner
from results_file import read_cells


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: a stream: (event name or None, data) each, sent as `event: NAME` (when set) and `data: JSON`
    events: Sequence[tuple[str | None, Any]] | None = None


class ContractServer(ThreadedAioServer):
    thread_name = "contract-server"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.answers: list[Answer] = []
        self.default = Answer(500, {"error": {"message": "nothing scripted"}})

    def script(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests.clear()

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "body": json.loads(raw) if raw else None,
            }
        )
        answer = self.answers.pop(0) if self.answers else self.default
        if answer.events is None:
            return web.json_response(answer.body, status=answer.status, headers=answer.headers)
        resp = web.StreamResponse(status=answer.status, headers={"Content-Type": "text/event-stream", **answer.headers})
        await resp.prepare(request)
        for name, data in answer.events:
            text = data if isinstance(data, str) else json.dumps(data)
            await resp.write(((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode())
        await resp.write_eof()
        return resp


def run_cell(
    tmp_path: Path, provider: str, model: str, target_extra: str = "", *, base_url: str | None = None
) -> tuple[int, str, dict[str, Any]]:
    """Run one case (``What is the capital of France?``) against ``provider``; ``(exit code, output, the cell)``."""
    extra = textwrap.indent(textwrap.dedent(target_extra).strip("\n"), " " * 4)
    base = f"    base_url: {base_url}\n" if base_url else ""  # added after the dedent: it would change the margin
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: contract
            targets:
              - id: model
                type: provider
                provider: {provider}
                model: {model}
                retries: 2
            """
        )
        + base
        + (extra + "\n" if extra else "")
        + textwrap.dedent(
            """\
            datasets:
              - id: d
                cases:
                  - id: capital
                    input: What is the capital of France?
            """
        ),
        encoding="utf-8",
    )
    from evalx.cli import main

    result = CliRunner().invoke(main, ["run", "-c", str(config), "--no-cache"])
    assert (tmp_path / "runs").is_dir(), result.output
    runs = sorted((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    [cell] = read_cells(runs[-1])
    return result.exit_code, result.output, cell
