"""A runs folder for the viewer tests: real `evalx run`s of a Python bot whose answers change between runs."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from cli_project import run_cli, write_config

BOT = """
import pathlib

def answer(q):
    mode = pathlib.Path(__file__).with_name("mode.txt").read_text().strip()
    if mode == "b":
        return {"flip": "a different answer", "up1": "up1 fixed", "up2": "up2 fixed"}.get(q, q)
    return q
"""

#: in mode a: steady and flip pass, up1/up2/never fail; in mode b: flip fails, up1/up2 pass (the pass rate rises)
DATASET = """
datasets:
  - id: d
    cases:
      - {id: steady, input: steady, assert: [{type: contains, value: steady}]}
      - {id: flip, input: flip, assert: [{type: contains, value: flip}]}
      - {id: up1, input: up1, assert: [{type: contains, value: fixed}]}
      - {id: up2, input: up2, assert: [{type: contains, value: fixed}]}
      - {id: never, input: never, assert: [{type: contains, value: always}]}
"""


def make_project(folder: Path, extra: str = "") -> Path:
    (folder / "bot.py").write_text(BOT)
    (folder / "mode.txt").write_text("a")
    return write_config(folder, "name: demo\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n" + extra, DATASET)


def run_mode(config: Path, mode: str, *args: str) -> Path:
    """One `evalx run` with the bot in ``mode``; the run's folder."""
    (config.parent / "mode.txt").write_text(mode)
    _, _, run_dir = run_cli(config, *args)
    return run_dir


def make_runs(folder: Path, modes: str = "aba") -> tuple[Path, list[Path]]:
    """``len(modes)`` runs, in order; (the config, the run folders oldest first)."""
    config = make_project(folder)
    return config, [run_mode(config, m) for m in modes]


def with_client(app: web.Application, body: Callable[[TestClient[Any, Any]], Awaitable[None]]) -> None:
    """``body`` with a client of ``app`` (:func:`evalx.viewer.app.make_app`) served on 127.0.0.1 in this process."""

    async def main() -> None:
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            await body(client)

    asyncio.run(main())


@contextmanager
def started_viewer(runs_dir: Path, *args: str) -> Iterator[tuple[str, str | None]]:
    """`evalx view RUNS_DIR --port 0 ARGS` in a process of its own; (its base URL on 127.0.0.1, its token or None). Stopped after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalx.cli", "view", str(runs_dir), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # printed once the socket listens
        match = re.search(r"http://[^/]+:(\d+)/(?:\?token=([\w-]+))?", line)
        assert match, line + (proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
        yield f"http://127.0.0.1:{match.group(1)}", match.group(2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
        assert "Traceback" not in err, err


def runs_apart(folder: Path, n: int, modes: str = "") -> tuple[Path, list[Path]]:
    """``n`` runs by `evalx run` in processes of their own (for tests whose process runs Playwright's loop); config, run folders."""
    config = make_project(folder)
    dirs: list[Path] = []
    for i in range(n):
        (folder / "mode.txt").write_text(modes[i] if i < len(modes) else "a")
        before = set((folder / "runs").iterdir()) if (folder / "runs").is_dir() else set()
        subprocess.run([sys.executable, "-m", "evalx.cli", "run", "-q"], cwd=folder, capture_output=True, timeout=300)
        (new,) = {p for p in (folder / "runs").iterdir() if p.name != ".viewer"} - before
        dirs.append(new)
    return config, dirs
