"""A case's ``context`` travels with its cells: results.jsonl, the HTML report's case detail and `evalx capture`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from browser import chromium
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

PASSAGES = ["Refunds are accepted within 30 days.", "Shipping is free over 50 euros <b>bold</b>."]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("context")
    (root / "bot.py").write_text("def answer(q):\n    return 'Refunds within 90 days.'\n")
    config = write_config(
        root,
        "targets: [{id: bot, type: python, callable: bot.py:answer}]\n",
        f"""
        datasets:
          - id: rag
            cases:
              - {{id: refunds, input: 'How long for refunds?', context: {json.dumps(PASSAGES)},
                  assert: [{{type: contains, value: '30 days'}}]}}
              - {{id: plain, input: 'hello', assert: [{{type: contains, value: 'Refunds'}}]}}
        """,
    )
    code, output, run = run_cli(config, "-q")
    assert code == 1, output
    return run


def test_results_keep_the_context_of_cases_that_have_one(run_dir: Path) -> None:
    cells = {c["case_id"]: c for c in read_cells(run_dir)}
    assert cells["refunds"]["context"] == PASSAGES
    assert "context" not in cells["plain"]


def _data(html: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', html, flags=re.S)
    assert match
    return json.loads(match.group(1))  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_report_embeds_the_context_and_shows_it_as_text(run_dir: Path) -> None:
    data = _data((run_dir / "report.html").read_text(encoding="utf-8"))
    cases = {c["id"]: c for c in data["cases"]}
    assert "Refunds are accepted within 30 days." in str(cases["refunds"]["cx"])
    assert "cx" not in cases["plain"]
    for browser in chromium():
        page = browser.new_page()
        page.goto((run_dir / "report.html").resolve().as_uri())
        page.wait_for_selector("#mx-body tr.row")
        row = [t.strip() for t in page.locator("#mx-body .cid").all_text_contents()].index("refunds")
        page.click(f'#mx-body button.chip[data-row="{row}"][data-t="0"]')
        page.wait_for_selector("#detail:not([hidden])")
        body = page.locator("#d-body").inner_text()
        assert "context" in body.lower() and "Refunds are accepted within 30 days." in body and "<b>bold</b>" in body
        assert page.locator("#d-body b").count() == 0
        page.close()


def test_capture_keeps_the_context(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cases"
    result = CliRunner().invoke(main, ["capture", str(run_dir), "--case", "refunds", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (path,) = out.iterdir()
    assert yaml.safe_load(path.read_text())["context"] == PASSAGES
