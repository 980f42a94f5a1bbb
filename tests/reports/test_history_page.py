"""`evalx report --history RUNS_DIR -o FILE`: the runs and case histories as one self-contained page, the same code as `evalx view`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from viewer_project import make_runs

from evalx.cli import main


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return make_runs(tmp_path_factory.mktemp("history"), "aba")


def test_history_page_is_self_contained(runs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    config, dirs = runs
    out = tmp_path / "site" / "history.html"
    res = CliRunner().invoke(main, ["report", "--history", str(config.parent / "runs"), "-o", str(out)])
    assert res.exit_code == 0 and "wrote" in res.output and "(3 runs)" in res.output, res.output
    html = out.read_text()
    assert all(d.name in html for d in dirs)
    assert "<svg" in html and "Pass rate" in html and "p99 latency" in html  # the trends
    assert html.count('class="case-row"') == 5  # every case × target, with its strip
    assert 'data-flags="regressed flaky"' in html and "never passing" in html
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|https?://", html)  # nothing loaded from anywhere
    assert "<form" not in html and 'href="/' not in html  # no links into an app that is not there
    assert html.count("<!doctype html>") == 1


def test_history_page_usage_errors(runs: tuple[Path, list[Path]], tmp_path: Path) -> None:
    config, dirs = runs
    runner = CliRunner()
    missing = runner.invoke(main, ["report", "--history", str(tmp_path / "nope"), "-o", str(tmp_path / "h.html")])
    assert missing.exit_code == 2 and "no such folder" in missing.output
    no_out = runner.invoke(main, ["report", "--history", str(config.parent / "runs")])
    assert no_out.exit_code == 2 and "--history RUNS_DIR -o FILE" in no_out.output
    both = runner.invoke(main, ["report", str(dirs[0]), "--history", str(config.parent / "runs"), "-o", str(tmp_path / "h.html")])
    assert both.exit_code == 2 and "without a RUN" in both.output
    nothing = runner.invoke(main, ["report"])
    assert nothing.exit_code == 2 and "give a RUN" in nothing.output
    for res in (missing, no_out, both, nothing):
        assert "Traceback" not in res.output
