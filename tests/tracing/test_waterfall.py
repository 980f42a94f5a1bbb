"""report.html shows a traced cell's spans as a waterfall (headless Chromium): rows, depth, status, escaped names."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium

HERE = Path(__file__).parent
XSS = "<img src=x onerror=window.__pwned=1>"


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run, made before the browser starts (Playwright's sync API keeps an event loop running)."""
    project = tmp_path_factory.mktemp("waterfall")
    shutil.copy(HERE / "traced_app.py", project / "traced_app.py")
    (project / "evalconfig.yaml").write_text(
        "targets:\n  - {id: app, type: python, callable: traced_app.py:named}\n"
        "tracing: {receive: true}\n"
        f"datasets:\n  - id: d\n    cases:\n      - {{id: c, input: '{XSS}', assert: [{{type: trace_errors}}]}}\n"
    )
    subprocess.run([sys.executable, "-m", "evalx", "run", "-q"], cwd=project, capture_output=True, timeout=300)
    (run,) = list((project / "runs").iterdir())
    return run


@pytest.fixture(scope="module")
def browser(traced_run: Path) -> Iterator[Any]:
    yield from chromium()


@pytest.mark.slow
def test_the_cell_detail_shows_the_trace_as_a_waterfall(traced_run: Path, browser: Any) -> None:
    url = (traced_run / "report.html").resolve().as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    context.route(re.compile(r"^(?!file://).*"), lambda route: route.abort())
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_selector("#mx-body tr.row")
        page.click('#mx-body button.chip[data-row="0"][data-t="0"]')
        page.wait_for_selector("#detail:not([hidden])")
        assert page.locator("#d-body h3", has_text="Trace").text_content() == "Trace (4 spans)"
        rows = page.locator("#d-body table.spans tr")
        assert rows.count() == 4
        names = page.locator("#d-body table.spans td.sname").all_text_contents()
        assert names[:2] == ["invoke_agent", "chat gpt-test"] and XSS in names
        # nesting shows as indentation: the chat span sits under invoke_agent
        pads = [page.locator("#d-body table.spans td.sname").nth(i).evaluate("e => parseInt(e.style.paddingLeft)") for i in (0, 1)]
        assert pads[1] > pads[0]
        failed = page.locator("#d-body table.spans tr.serr")
        assert failed.count() == 1 and failed.locator("td.sstatus").text_content() == "error"
        attrs = page.locator("#d-body table.spans td.sattrs").all_text_contents()
        assert "gen_ai.operation.name=chat" in attrs[1] and "gen_ai.usage.input_tokens=12" in attrs[1]
        assert page.locator("#d-body img").count() == 0  # the span's name is text, never markup
        assert page.evaluate("typeof window.__pwned") == "undefined"
        assert errors == []
    finally:
        context.close()
