"""Issue 15, "the headline pools all models": with several targets every report is per target.

Real `evalx run`s through the CLI (CliRunner) of two Python targets, of one,
and of a `--matrix` provider target with two model variants against the fake
OpenAI server on 127.0.0.1. With several targets the terminal summary,
summary.txt, summary.json, the Markdown summary and the HTML report (in
headless Chromium) show a headline, a category table and a difficulty table
per target, and the rate pooled over different models only as a footnote;
with one target the text output is what it was. The Markdown has each
target's category × difficulty table and mean score (the golden_qa runner's
breakdown), and the HTML report shows a case's description and notes.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _fake_llm import OPENAI_KEY, FakeLLMServer, server  # noqa: F401  (fixture)
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

# partial: easy cases "yes!" (both checks hold, score 1), hard ones "yes" (score 0.5, fails), "crash" raises (error, no score)
AGENT = """
def good(question):
    return "yes! " + question


def partial(question):
    if question == "crash":
        raise RuntimeError("boom")
    return "yes!" if "easy" in question else "yes"
"""

CONFIG = """
version: 1
name: per-target
defaults: {timeout_s: 10, retries: 0}
targets:
  - {id: good, type: python, callable: agent.py:good}
  - {id: partial, type: python, callable: agent.py:partial}
datasets:
  - id: qa
    cases:
      - {id: a1, input: easy one, category: billing, difficulty: easy, description: "Refund window <b>question</b>", notes: "Kept: customers ask it daily"}
      - {id: a2, input: hard one, category: billing, difficulty: hard}
      - {id: a3, input: easy two, category: shipping, difficulty: easy}
      - {id: a4, input: hard two, category: shipping, difficulty: hard}
      - {id: a5, input: crash, category: shipping}
assert:
  - {type: contains, value: "yes"}
  - {type: contains, value: "!"}
output: {dir: runs}
"""


def _run(tmp_path: Path, *args: str) -> tuple[Any, Path]:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "evalconfig.yaml").write_text(CONFIG, encoding="utf-8")
    before = set((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else set()
    result = CliRunner().invoke(main, ["run", "-c", str(tmp_path / "evalconfig.yaml"), "-v", *args])  # -v: the full summary
    (run_dir,) = set((tmp_path / "runs").iterdir()) - before
    return result, run_dir


@pytest.fixture(scope="module")
def two_targets(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """A real two-target run with --markdown and --html: (terminal output, run dir, project dir)."""
    project = tmp_path_factory.mktemp("two")
    result, run_dir = _run(project, "--markdown", str(project / "summary.md"), "--html", str(project / "report.html"))
    assert result.exit_code == 1, result.output  # partial fails and errors
    return result.output, run_dir, project


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


# ---------------------------------------------------------------- terminal and summary.txt


def test_terminal_headline_and_tables_are_per_target(two_targets: tuple[str, Path, Path]) -> None:
    output, run_dir, _ = two_targets
    lines = output.splitlines()
    assert lines[1] == "2 targets · 10 cells: 7 pass · 2 fail · 1 error · 0 skipped"
    assert lines[2] == "Pass rate per target:"
    assert lines[3].split()[:2] == ["good", "100.0%"] and lines[3].endswith("5/5 cells")
    assert lines[4].split()[:2] == ["partial", "40.0%"] and lines[4].endswith("2/5 cells")
    # the pooled 70% (7 of 10) is only the footnote, last, and says what it mixes
    footnote = next(line for line in lines if "pooled" in line)
    assert footnote.startswith("all targets pooled: 70.0% (95% CI ") and "2 targets mixed" in footnote
    assert lines.index(footnote) > lines.index("Failed cases:")
    assert not any("70.0%" in line for line in lines if line != footnote)
    assert not any(line.startswith("Pass rate 70.0%") for line in lines)

    def table(first_header: str) -> list[list[str]]:
        start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["target", first_header])
        rows = []
        for line in lines[start + 2 :]:
            if not line.strip():
                break
            rows.append(line.split())
        return rows

    # each target's own categories; the target named once, on its first row
    assert table("category") == [
        ["good", "billing", "2", "2", "0", "0", "0", "100.0%", "34.2–100.0%"],
        ["shipping", "3", "3", "0", "0", "0", "100.0%", "43.9–100.0%"],
        ["partial", "billing", "2", "1", "1", "0", "0", "50.0%", "9.5–90.5%"],
        ["shipping", "3", "1", "1", "1", "0", "33.3%", "6.1–79.2%"],
    ]
    assert [row[:4] for row in table("difficulty")] == [
        ["good", "easy", "2", "2"],
        ["hard", "2", "2", "0"],
        ["partial", "easy", "2", "2"],
        ["hard", "2", "0", "2"],
    ]
    # summary.txt is the same renderer: the same per-target headline and tables
    text = (run_dir / "summary.txt").read_text(encoding="utf-8")
    for line in lines[2:5] + [footnote]:
        assert line in text.splitlines()


def test_one_target_output_is_as_before(tmp_path: Path) -> None:
    result, run_dir = _run(tmp_path, "--target", "partial", "--markdown", str(tmp_path / "one.md"), "--html", str(tmp_path / "one.html"))
    lines = result.output.splitlines()
    assert lines[1] == "5 cells: 2 pass · 2 fail · 1 error · 0 skipped"
    assert lines[2] == "Pass rate 40.0%  (95% CI 11.8–76.9%)"
    assert "pooled" not in result.output and "per target" not in result.output
    headers = [line.split()[0] for line in lines if line.startswith(("category", "difficulty")) and line.split()[1] == "cells"]
    assert headers == ["category", "difficulty"]  # the pooled tables of a one-target run are that target's own
    assert "Output size by difficulty:" in result.output and "target" not in next(x for x in lines if x.startswith("difficulty  tok"))
    assert next(line for line in lines if line.startswith("shipping")).split() == [
        "shipping",
        "3",
        "1",
        "1",
        "1",
        "0",
        "33.3%",
        "6.1–79.2%",
    ]
    assert (run_dir / "summary.txt").read_text(encoding="utf-8").startswith("\n".join(lines[:3]))
    markdown = (tmp_path / "one.md").read_text(encoding="utf-8")
    assert "**Pass rate 40.0%** · 5 cells" in markdown and "pooled" not in markdown
    assert "### By category and difficulty\n\nMean score **0.750** over 4 scored cells\n" in markdown
    html = (tmp_path / "one.html").read_text(encoding="utf-8")
    assert 'id="kpi-rates"' not in html and '<div class="kpi-value">40.0%</div>' in html


# ---------------------------------------------------------------- summary.json


def test_summary_json_has_per_target_breakdowns_that_match_the_results(two_targets: tuple[str, Path, Path]) -> None:
    _, run_dir, _ = two_targets
    summary = _summary(run_dir)
    results = read_cells(run_dir)
    # the existing keys stay: the pooled totals and groups are still there (for whoever read them)
    assert summary["totals"]["pass_rate"] == pytest.approx(0.7) and set(summary["per_category"]) == {"billing", "shipping"}
    assert summary["totals"]["mean_score"] == pytest.approx((5 * 1.0 + 1 + 0.5 + 1 + 0.5) / 9) and summary["totals"]["scored_cells"] == 9
    for target_id, figures in summary["per_target"].items():
        mine = [r for r in results if r["target"] == target_id]
        scores = [r["score"] for r in mine if r["score"] is not None]
        assert figures["mean_score"] == pytest.approx(sum(scores) / len(scores)) and figures["scored_cells"] == len(scores)
        for key, field in (("per_category", "category"), ("per_difficulty", "difficulty")):
            expected = {}
            for r in mine:
                if r[field] is not None:
                    expected.setdefault(r[field], []).append(r["status"])
            assert list(figures[key]) == list(expected)  # matrix order
            for name, statuses in expected.items():
                group = figures[key][name]
                assert [group["cells"], group["pass"], group["fail"], group["error"]] == [
                    len(statuses),
                    statuses.count("pass"),
                    statuses.count("fail"),
                    statuses.count("error"),
                ]
                assert group["case_level"]["cases"] == len(statuses)
        cross = {(g["category"], g["difficulty"]): g for g in figures["per_category_difficulty"]}
        assert list(cross) == list(dict.fromkeys((r["category"], r["difficulty"]) for r in mine))
        for (category, difficulty), group in cross.items():
            here = [r for r in mine if (r["category"], r["difficulty"]) == (category, difficulty)]
            assert group["cells"] == len(here) and group["pass"] == sum(r["status"] == "pass" for r in here)
    partial = summary["per_target"]["partial"]
    assert partial["per_category"]["shipping"]["pass_rate"] == pytest.approx(1 / 3)
    assert partial["per_category"]["billing"]["mean_score"] == pytest.approx(0.75)
    assert partial["per_difficulty"]["hard"]["pass_rate"] == 0.0 and "None" not in partial["per_difficulty"]
    assert {"category": "shipping", "difficulty": None, "cells": 1, "error": 1, "mean_score": None, "scored_cells": 0}.items() <= (
        partial["per_category_difficulty"][-1].items()
    )


# ---------------------------------------------------------------- markdown


def test_markdown_has_per_target_category_by_difficulty_and_mean_score(two_targets: tuple[str, Path, Path]) -> None:
    _, _, project = two_targets
    markdown = (project / "summary.md").read_text(encoding="utf-8")
    assert "**Pass rate" not in markdown.split("###")[0]  # no pooled headline
    assert "**2 targets** · 10 cells: 7 pass · 2 fail · 1 error · 0 skipped" in markdown
    assert "| good | 5 | **100.0%** | 56.6–100.0% | 1.000 |" in markdown
    assert "| partial | 5 | **40.0%** | 11.8–76.9% | 0.750 |" in markdown
    section = markdown[markdown.index("### By category and difficulty: `partial`") :]
    assert section.startswith(
        "### By category and difficulty: `partial`\n\n"
        "Pass rate **40.0%** (95% CI 11.8–76.9%) · mean score **0.750** over 4 scored cells\n\n"
        "| category | easy | hard | (none) | all | mean score |\n"
        "|---|--:|--:|--:|--:|--:|\n"
        "| billing | 100.0% (1/1) | 0.0% (0/1) |  | 50.0% (1/2) | 0.750 |\n"
        "| shipping | 100.0% (1/1) | 0.0% (0/1) | 0.0% (0/1) | 33.3% (1/3) | 0.750 |\n"
        "| **all** | 100.0% (2/2) | 0.0% (0/2) | 0.0% (0/1) | 40.0% (2/5) | 0.750 |\n"
    )
    good = markdown[markdown.index("### By category and difficulty: `good`") : markdown.index("### By category and difficulty: `partial`")]
    assert "| **all** | 100.0% (2/2) | 100.0% (2/2) | 100.0% (1/1) | 100.0% (5/5) | 1.000 |" in good
    # the gates, failures and pairwise parts are still there; the pooled rate is a footnote at the very end
    assert "**Failing cells (3)**" in markdown
    assert markdown.rstrip().splitlines()[-1].startswith("<sub>all targets pooled: 70.0%")
    assert markdown.count("70.0%") == 1


# ---------------------------------------------------------------- matrix variants


def test_matrix_variants_are_reported_per_variant(tmp_path: Path, server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: variants
            defaults: {{retries: 0}}
            targets:
              - id: mini
                type: provider
                provider: openai
                model: model-a
                base_url: {server.url}/v1
                api_key: {OPENAI_KEY}
                prompt: "{{{{ case.input }}}}"
            matrix:
              targets: [mini]
              params: {{model: [model-a, model-b]}}
            datasets:
              - id: qa
                cases:
                  - {{id: sum, input: "What is 2 + 2?", category: maths, difficulty: easy, assert: [{{type: contains, value: "4"}}]}}
                  - {{id: joke, input: "Tell me a joke", category: fun, difficulty: hard, assert: [{{type: contains, value: "haha"}}]}}
            output: {{dir: runs}}
            """
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-v", "--matrix", "--no-cache", "--markdown", str(tmp_path / "m.md")])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    variants = ["mini[model=model-a]", "mini[model=model-b]"]
    start = lines.index("Pass rate per target:")
    assert [line.split()[:2] for line in lines[start + 1 : start + 3]] == [[v, "50.0%"] for v in variants]
    assert any(line.startswith("all targets pooled: 50.0%") for line in lines)
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = _summary(run_dir)
    assert list(summary["per_target"]) == variants
    for variant in variants:
        assert summary["per_target"][variant]["per_category"]["fun"]["pass_rate"] == 0.0
        assert summary["per_target"][variant]["per_difficulty"]["easy"]["pass_rate"] == 1.0
    markdown = (tmp_path / "m.md").read_text(encoding="utf-8")
    assert [m for m in re.findall(r"^### By category and difficulty: `(.+)`$", markdown, re.M)] == variants


# (last: Playwright's sync API keeps an event loop running in this thread from here to the end of the module)
# ---------------------------------------------------------------- HTML, in a real browser


@pytest.mark.slow
def test_html_headline_and_breakdowns_per_target_and_case_notes(two_targets: tuple[str, Path, Path], browser: Any) -> None:
    _, run_dir, project = two_targets
    assert (project / "report.html").read_bytes() == (run_dir / "report.html").read_bytes()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((run_dir / "report.html").resolve().as_uri())
    page.wait_for_selector("#mx-body tr.row")
    try:
        rates = [" ".join(t.split()) for t in page.locator("#kpi-rates li.kpi-rate").all_inner_texts()]
        assert [r.split()[:2] for r in rates] == [["good", "100.0%"], ["partial", "40.0%"]]
        assert page.locator("#kpi-rates").is_visible()
        # no headline figure is the pooled 70%: it is the footnote under the per-target rates
        assert "70.0%" not in page.locator(".kpi .kpi-value").all_inner_texts()
        assert page.locator("#pooled-note").inner_text().startswith("all targets pooled: 70.0%")
        assert "70.0%" not in page.locator("main").inner_text().replace(page.locator("#pooled-note").inner_text(), "")

        def cross(target: str) -> list[list[str]]:
            table = page.locator(f'#breakdowns .breakdown[data-target="{target}"] table')
            return [[c.strip() for c in row.split("\t")] for row in table.locator("tr").all_inner_texts()]

        assert cross("partial") == [
            ["CATEGORY", "EASY", "HARD", "(NONE)", "ALL", "MEAN SCORE"],
            ["billing", "100.0% (1/1)", "0.0% (0/1)", "", "50.0% (1/2)", "0.750"],
            ["shipping", "100.0% (1/1)", "0.0% (0/1)", "0.0% (0/1)", "33.3% (1/3)", "0.750"],
            ["all", "100.0% (2/2)", "0.0% (0/2)", "0.0% (0/1)", "40.0% (2/5)", "0.750"],
        ]
        assert cross("good")[-1][-2:] == ["100.0% (5/5)", "1.000"]
        assert page.locator('#breakdowns .breakdown[data-target="partial"] .bd-head').inner_text().startswith("pass rate 40.0%")

        # a case's description and notes, in its detail (as text: the <b> in the description is not markup)
        page.click('#mx-body button.chip[data-row="0"][data-t="1"]')
        page.wait_for_selector("#detail:not([hidden])")
        body = page.locator("#d-body").inner_text()
        assert "Refund window <b>question</b>" in body and "Kept: customers ask it daily" in body
        assert page.locator("#d-body b").count() == 0
        assert [h.lower() for h in page.locator("#d-body h3").all_inner_texts()][:3] == ["description", "notes", "input"]
        page.keyboard.press("Escape")
        page.click('#mx-body button.chip[data-row="1"][data-t="1"]')  # a2 has neither
        assert "description" not in [h.lower() for h in page.locator("#d-body h3").all_inner_texts()]
        assert errors == []
    finally:
        context.close()
