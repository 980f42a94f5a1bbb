"""report.html past its cap (``--html-max-cells``): every failure and error up to the cap, passes sampled, and the page says so.

A real `evalx run` of a python target over 300 cases (6 fail, 4 error) is
rendered with a cap of 100, and again by `evalx report` with other caps; the
pages are opened in headless Chromium (skipped without it, as in
tests/reports/test_html.py). One test builds a 200,000-cell results.jsonl from a real
run's cells and checks that the report at the default cap stays small and
opens in under 3 s.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from browser import chromium
from click.testing import CliRunner

from evalx.cli import main
from evalx.reports.html import MAX_CELLS, PASS_SHARE, Sampling
from evalx.results.store import read_results

N_CASES = 300
AGENT = """
def echo(text):
    if text.split()[-1] in ("7", "107", "151", "207"):
        raise RuntimeError("boom " + text)
    return "Hello " + text
"""
CONFIG = """
version: 1
name: scale
defaults: {timeout_s: 10, retries: 0}
targets:
  - {id: echo, type: python, callable: scale_agent.py:echo}
datasets:
  - {id: big, path: cases.jsonl}
output: {dir: runs}
"""
FAILING = [f"case-{i:04d}" for i in range(0, N_CASES, 50)]  # contains "nobody": 0, 50, ... 250
ERRORS = [f"case-{i:04d}" for i in (7, 107, 151, 207)]
BAD = sorted(FAILING + ERRORS)


def _project(folder: Path, n: int) -> Path:
    with open(folder / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            value = "nobody" if i % 50 == 0 else f"user {i}"
            case = {"id": f"case-{i:04d}", "input": f"Say hello to user {i}", "assert": [{"type": "contains", "value": value}]}
            f.write(json.dumps(case) + "\n")
    (folder / "scale_agent.py").write_text(AGENT, encoding="utf-8")
    (folder / "evalconfig.yaml").write_text(CONFIG, encoding="utf-8")
    return folder / "evalconfig.yaml"


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def _data(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', html, flags=re.S)
    assert match
    return json.loads(match.group(1))  # type: ignore[no-any-return]


def _statuses(data: dict[str, Any]) -> dict[str, list[str]]:
    """case id -> statuses of its embedded cells."""
    out: dict[str, list[str]] = {}
    for cell in data["cells"]:
        out.setdefault(data["cases"][cell["c"]]["id"], []).append(cell["s"])
    return out


@pytest.fixture(scope="module")
def sampled_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `evalx run --html-max-cells 100` of 300 cells; returns its run directory."""
    project = tmp_path_factory.mktemp("scale")
    config = _project(project, N_CASES)
    code, _, err = _cli("run", "-c", str(config), "-q", "--html-max-cells", "100")
    assert code == 1, err  # some cells fail
    (run_dir,) = [p for p in (project / "runs").iterdir() if p.is_dir()]
    return run_dir


def test_past_the_cap_every_failure_is_embedded_and_passes_are_sampled(sampled_run: Path) -> None:
    html = (sampled_run / "report.html").read_text(encoding="utf-8")
    data = _data(html)
    statuses = _statuses(data)
    assert len(data["cells"]) == 100 and len(data["cases"]) == 100  # only the cases the cells reference
    assert sorted(c for c, s in statuses.items() if s != ["pass"]) == BAD
    assert [statuses[c] for c in ERRORS] == [["error"]] * 4
    passes = sorted(c for c, s in statuses.items() if s == ["pass"])
    assert len(passes) == 90
    # evenly spread over the 290 passing cells: the first one, then about every 3rd, up to the end
    numbers = [int(c.split("-")[1]) for c in passes]
    assert numbers[0] == 1 and numbers[-1] >= 290
    assert max(b - a for a, b in pairwise(numbers)) <= 5
    assert data["sample"] == {
        "cells": 300,
        "cap": 100,
        "embedded": 100,
        "bad": 10,
        "bad_kept": 10,
        "bad_cap": 90,
        "skipped": 0,
        "skipped_kept": 0,
        "passes": 290,
        "pass_kept": 90,
        "command": f"evalx report {sampled_run.name} --html-max-cells N",
    }
    # the figures are the whole run's
    assert re.search(r'<div class="kpi-label">Cells</div>\s*<div class="kpi-value">300</div>', html)


def test_report_rerenders_with_another_cap(sampled_run: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sampled_run, run_dir)
    # a cap smaller than the failures: the first in matrix order, and one pass
    code, _, err = _cli("report", str(run_dir), "--html-max-cells", "8")
    assert code == 0, err
    data = _data((run_dir / "report.html").read_text(encoding="utf-8"))
    statuses = _statuses(data)
    assert [c for c, s in statuses.items() if s != ["pass"]] == BAD[:7]
    assert [c for c, s in statuses.items() if s == ["pass"]] == ["case-0001"]
    assert (data["sample"]["bad_kept"], data["sample"]["bad_cap"], data["sample"]["pass_kept"]) == (7, 7, 1)
    # 0: no cap, every cell and no notice
    code, _, err = _cli("report", str(run_dir), "--html-max-cells", "0")
    assert code == 0, err
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    data = _data(html)
    assert len(data["cells"]) == N_CASES and "sample" not in data and 'id="sample-notice"' not in html
    # the default cap (far above 300): the same page (given: `evalx report` otherwise keeps the run's own cap, 100 here)
    code, _, err = _cli("report", str(run_dir), "--html-max-cells", str(MAX_CELLS))
    assert code == 0, err
    assert (run_dir / "report.html").read_text(encoding="utf-8") == html


def test_a_run_without_failures_says_so(sampled_run: Path, tmp_path: Path) -> None:
    run_dir = _copy_run(sampled_run, tmp_path / "passing", lambda i, cell: cell if cell["status"] == "pass" else None, N_CASES)
    code, _, err = _cli("report", str(run_dir), "--html-max-cells", "10")
    assert code == 0, err
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "no failed or errored cell: the run has none" in html
    assert "<b>10</b> of 290 passing cells, an evenly spread sample" in html
    assert _data(html)["sample"]["embedded"] == 10


def _copy_run(run: Path, to: Path, cell_for: Any, n: int) -> Path:
    """A run folder beside ``run`` whose results.jsonl holds ``cell_for(i, cell)`` for i < n (v1 lines, which every reader accepts)."""
    to.mkdir()
    for name in ("run.json", "config.yaml", "summary.json"):
        shutil.copy(run / name, to / name)
    cells = list(read_results(run / "results.jsonl"))
    with open(to / "results.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            cell = cell_for(i, dict(cells[i % len(cells)]))
            if cell is not None:
                f.write(json.dumps(cell) + "\n")
    return to


@pytest.mark.parametrize("value", ["-1", "many", "1.5"])
@pytest.mark.parametrize("command", ["run", "report"])
def test_bad_cap_is_one_line_and_exit_2(tmp_path: Path, command: str, value: str) -> None:
    config = _project(tmp_path, 3)
    code, out, err = _cli(command, *(["latest"] if command == "report" else []), "-c", str(config), "--html-max-cells", value)
    assert code == 2
    assert err == f"evalx: --html-max-cells {value}: give a whole number of cells, 0 (no cap) or more\n"
    assert not (tmp_path / "runs").exists()


def test_default_cap_is_what_the_help_and_docs_say() -> None:
    for command in ("run", "report"):
        code, out, _ = _cli(command, "--help")
        assert code == 0
        assert f"(default {MAX_CELLS:,})" in " ".join(out.split()), out
    assert 10_000 <= MAX_CELLS <= 20_000 and MAX_CELLS // PASS_SHARE == 1_000
    docs = Path(__file__).resolve().parents[2] / "docs" / "reports.md"
    text = docs.read_text(encoding="utf-8")
    if "--html-max-cells" not in text:
        pytest.skip("docs/reports.md does not describe --html-max-cells yet")
    assert f"{MAX_CELLS:,}" in text
    assert f"{MAX_CELLS // PASS_SHARE:,}" in text


def test_sampling_caps_and_spreads() -> None:
    # more failures and skips than fit: failures first, skips in what is left, a share for passes
    sample = Sampling(1000, {"cells": 100_000, "pass": 90_000, "fail": 500, "error": 200, "skipped": 9_300})
    assert (sample.bad_cap, sample.skipped_cap, sample.pass_cap) == (900, 200, 100)
    kept = [i for i in range(90_000) if sample.keep("pass")]
    assert len(kept) == 100 and kept[0] == 0 and all(b - a == 900 for a, b in pairwise(kept))
    assert sum(sample.keep("skipped") for _ in range(9_300)) == 200
    assert sum(sample.keep(s) for s in ["fail", "error"] * 350) == 700
    # totals that undercount: the caps still hold
    sample = Sampling(10, {"cells": 11, "pass": 5, "fail": 6})
    assert sum(sample.keep("pass") for _ in range(100)) <= sample.pass_cap
    assert sum(sample.keep("fail") for _ in range(100)) == sample.bad_cap == 9
    assert Sampling.plan({"totals": {"cells": 5}}, 5) is None  # type: ignore[typeddict-item]
    assert Sampling.plan({"totals": {"cells": 6}}, 0) is None  # type: ignore[typeddict-item]
    assert Sampling.plan({"totals": {"cells": MAX_CELLS + 1}}, None) is not None  # type: ignore[typeddict-item]


# ---------------------------------------------------------------- in a real browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (tests/browser.py: skipped without it, failing in CI)."""
    yield from chromium()


def _open(browser: Any, path: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.resolve().as_uri(), wait_until="load")
    page.wait_for_selector("#mx-body tr.row")
    return page, errors


@pytest.mark.slow
def test_browser_shows_the_notice_and_the_sample(sampled_run: Path, browser: Any) -> None:
    page, errors = _open(browser, sampled_run / "report.html")
    try:
        notice = " ".join(page.locator("#sample-notice").inner_text().split())
        assert "The matrix shows 100 of this run's 300 cells" in notice
        assert "cap: 100 cells" in notice and "cover all 300 cells" in notice
        assert "10 of 10 failed or errored cells (every one)" in notice
        assert "90 of 290 passing cells, an evenly spread sample" in notice
        assert "results.jsonl" in notice and f"evalx report {sampled_run.name} --html-max-cells N" in notice
        # the notice comes before the headline figures
        assert page.evaluate("document.getElementById('sample-notice').nextElementSibling.classList.contains('kpis')")
        assert "100 cells embedded (a sample of the run's 300 cells" in page.locator("#mx-count").inner_text()
        page.select_option("#f-status", "bad")
        page.wait_for_function("document.getElementById('mx-count').textContent.startsWith('showing')")
        assert page.locator("#mx-body .cid").all_text_contents() == BAD
        assert "of 100 embedded cases" in page.locator("#mx-count").inner_text()
        assert "sample of the run's 300 cells" in page.locator("#mx-count").inner_text()
        page.select_option("#f-status", "pass")
        page.wait_for_function("document.getElementById('mx-count').textContent.includes('90 of')")
        assert errors == []
    finally:
        page.close()


@pytest.mark.slow
def test_browser_opens_a_200k_cell_report_quickly(sampled_run: Path, browser: Any, tmp_path: Path) -> None:
    """200,000 cells (a real run's cells, renamed) at the default cap: a small file that opens quickly.

    The cap is what keeps it quick (the file's size and its embedded cells say
    so); the time bound, 15 s where it opens in ~1 s here, only catches a page
    that stalls, and holds on a loaded machine.
    """
    n = 200_000

    def renamed(i: int, cell: dict[str, Any]) -> dict[str, Any]:
        cell["case_id"], cell["index"] = f"copy-{i:06d}", i
        return cell

    run_dir = _copy_run(sampled_run, tmp_path / "big", renamed, n)
    cells = list(read_results(sampled_run / "results.jsonl"))
    started = time.perf_counter()
    code, _, err = _cli("report", str(run_dir), "--html-max-cells", str(MAX_CELLS))  # (the copied run recorded a cap of 100)
    assert code == 0, err
    written = time.perf_counter() - started
    size = (run_dir / "report.html").stat().st_size
    assert size < 6_000_000, size  # 10,000 small cells; the whole run would be ~50 MB
    data = _data((run_dir / "report.html").read_text(encoding="utf-8"))
    assert data["sample"]["cells"] == n and data["sample"]["embedded"] == MAX_CELLS
    bad = sum(cells[i % N_CASES]["status"] != "pass" for i in range(n))
    assert data["sample"]["bad_kept"] == data["sample"]["bad"] == bad and len(data["cells"]) == MAX_CELLS
    loads: list[float] = []
    while len(loads) < 2 and not (loads and loads[0] < 15.0):  # a second try only if the first was slow: the machine is shared
        started = time.perf_counter()
        page, errors = _open(browser, run_dir / "report.html")
        loads.append(time.perf_counter() - started)
        assert errors == []
        assert f"{MAX_CELLS:,} cells embedded" in page.locator("#mx-count").inner_text()
        page.close()
    assert min(loads) < 15.0, (loads, written)
