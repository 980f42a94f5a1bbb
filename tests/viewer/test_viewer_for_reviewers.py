"""Issue 31, item 5 in headless Chromium: the review page shows each cell's input, output and assertion reasons beside a form
with no verdict chosen; trend charts name the runs under their x axis in a readable size; the runs list gives a pass rate per
target; the comparison's statistics are a table; every page (the run's report too) has the same navigation bar."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium
from viewer_project import runs_apart, started_viewer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


def test_pages_a_reviewer_can_work_with(browser: Any, tmp_path: Path) -> None:
    config, dirs = runs_apart(tmp_path, 3, "aba")
    newest = dirs[-1].name
    page = browser.new_page()
    with started_viewer(config.parent / "runs") as (base, _):
        # one navigation bar, the same links, on every page
        for path in ("/", "/cases", "/compare", f"/run/{newest}", f"/run/{newest}/review", "/case?target=bot&dataset=d&case=flip"):
            page.goto(base + path)
            links = page.locator("#evalx-viewer-bar a").all_inner_texts()
            assert links[:3] == ["Runs", "Case history", "Compare"], (path, links)
            assert page.locator("#evalx-viewer-bar").count() == 1, path

        # the review page: what the cell got, and why, beside a form with no verdict chosen
        page.goto(base + f"/run/{newest}/review?status=fail")
        cell = page.locator(".cell-review[data-case='d/never']")
        text = cell.inner_text()
        assert "never" in cell.locator("pre.output").inner_text()  # the output
        assert "expected to contain 'always'" in text  # the assertion's reason
        assert "INPUT" in text.upper() and "OUTPUT" in text.upper()
        verdict = cell.locator("select[name=verdict]")
        assert verdict.input_value() == ""  # nothing pre-selected, even for a failing cell
        facts, form = cell.locator(".cell-facts").bounding_box(), cell.locator("form.review").bounding_box()
        assert facts and form and form["x"] > facts["x"] + facts["width"] - 1  # beside, not below
        verdict.select_option("pass")
        cell.locator("input[name=comment]").fill("an acceptable answer")
        cell.locator("button:has-text('Mark')").click()
        page.wait_for_load_state()
        page.goto(base + f"/run/{newest}/review")  # (it is no longer a failure: the reviewer's verdict counts)
        assert "reviewed pass" in page.locator(".cell-review[data-case='d/never'] .review-note").inner_text()

        # trends: runs named under the x axis, in a size one can read
        page.goto(base + "/")
        ticks = page.locator(".charts svg").first.locator("text.tick")
        assert ticks.count() == 3 and newest in " ".join(ticks.all_text_contents())
        box = ticks.first.bounding_box()
        assert box is not None and box["height"] >= 10, box
        size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.chart text.axis')).fontSize)")
        heights = page.evaluate("() => document.querySelector('.chart text.axis').getBoundingClientRect().height")
        assert size >= 12 and heights >= 10, (size, heights)

        # the runs list: a pass rate per target, not a pooled one
        rates = page.locator(f"#runs tr[data-run='{newest}'] td.rates").inner_text()
        assert "bot" in rates and "%" in rates

        # compare: the statistics as a table
        page.goto(base + "/compare")
        rows = page.locator("#statistics tbody tr")
        assert rows.count() >= 3 and "pass rate" in rows.first.inner_text()
        assert page.locator("#comparison pre").count() == 0
    page.close()
