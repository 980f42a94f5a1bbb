"""Done-when of issue 22 in headless Chromium: `evalx view` over real runs — a case's history, two runs compared, a review mark set,
still there after a reload, and counted by `evalx run --baseline`'s gates and `evalx report` afterwards."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from browser import chromium
from viewer_project import make_project

from evalx.results.reviews import REVIEWS
from evalx.viewer.app import make_app

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest

GATES = """
gates:
  no_new_failures: true
"""


@contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """``app`` on 127.0.0.1 (a free port) in a thread of its own; its base URL."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["runner"], box["port"] = runner, runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        finally:
            ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(30)
    assert "port" in box, "the viewer did not start"
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


def evalx(config: Path, *args: str, mode: str | None = None) -> subprocess.CompletedProcess[str]:
    """`evalx ARGS` in a process of its own (Playwright's event loop runs in this one)."""
    if mode is not None:
        (config.parent / "mode.txt").write_text(mode)
    return subprocess.run([sys.executable, "-m", "evalx.cli", *args], cwd=config.parent, capture_output=True, text=True, timeout=120)


def run_mode(config: Path, mode: str) -> Path:
    before = set((config.parent / "runs").iterdir()) if (config.parent / "runs").is_dir() else set()
    res = evalx(config, "run", "-q", mode=mode)
    assert "Traceback" not in res.stderr, res.stderr
    (new,) = set((config.parent / "runs").iterdir()) - before - {config.parent / "runs" / ".viewer"}
    return new


def test_case_history_compare_and_a_review_mark_in_the_browser(browser: Any, tmp_path: Path) -> None:
    config = make_project(tmp_path, GATES)
    runs = [run_mode(config, mode) for mode in "aba"]  # case flip: pass, fail, pass
    newest = runs[-1].name
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    with serving(make_app(config.parent / "runs", reviewer="ana")) as base:
        page.goto(base + "/")
        assert page.locator("#runs tbody tr").count() == 3
        page.fill("input[data-filter]", newest)  # the runs filter
        assert page.locator("#runs tbody tr:visible").count() == 1

        # a case's history
        page.click("text=Case history")
        page.click("a:has-text('d/flip')")
        assert page.locator("h1").inner_text().startswith("d/flip")
        strip = page.locator(".panel .strip i")
        assert [strip.nth(i).get_attribute("class") for i in range(3)] == ["p", "f r", "p"]  # the middle run: regressed while the rate rose
        assert page.locator("#case-runs tbody tr").count() == 3

        # two runs compared: the default pair is the last two
        page.click("text=Compare")
        blocks = page.locator("#flips .flip").all_inner_texts()
        assert [b.split(" on ")[0] for b in blocks] == ["d/up1", "d/up2", "d/flip"]  # newly failing first, then newly passing
        assert "pass → fail" in blocks[0] and "-a different answer\n+flip" in blocks[2]
        assert "newly" in page.locator("#comparison").inner_text().lower()

        # a review mark on case never of the newest run: pass (the reviewer accepts its answer)
        page.goto(base + "/case?target=bot&dataset=d&case=never")
        row = page.locator(f"#case-runs tr[data-run='{newest}']")
        row.locator("select[name=verdict]").select_option("pass")
        row.locator("input[name=comment]").fill("never is an acceptable answer")
        row.locator("button:has-text('Mark')").click()
        page.wait_for_load_state()
        page.reload()
        note = page.locator(f"#case-runs tr[data-run='{newest}'] .review-note")
        assert "reviewed pass by ana" in note.inner_text() and "never is an acceptable answer" in note.inner_text()

        # the run's report, rendered with the mark
        page.goto(base + f"/run/{newest}")
        assert "1 cell reviewed, 1 overridden" in page.locator("p.reviewed").inner_text()
        assert all(url.startswith(base) for url in requests), [u for u in requests if not u.startswith(base)]
    page.close()

    stored = [json.loads(line) for line in (runs[-1] / REVIEWS).read_text().splitlines()]
    assert stored[-1]["case_id"] == "never" and stored[-1]["verdict"] == "pass" and stored[-1]["reviewer"] == "ana"
    # evalx report counts it
    res = evalx(config, "report", str(runs[-1]))
    assert res.returncode == 0, res.stderr
    summary = json.loads((runs[-1] / "summary.json").read_text())
    assert summary["reviews"]["overridden_cells"] == 1 and summary["totals"]["pass"] == 3
    # and evalx run's gates: never fails again, against a baseline that a reviewer said passes: a new failure
    res = evalx(config, "run", "--baseline", str(runs[-1]), mode="a")
    assert res.returncode == 1 and "no_new_failures" in res.stdout and "BREACHED" in res.stdout, res.stdout + res.stderr
