"""Issue 30, class 1, the Markdown outputs: case ids, assertion names, reasons and run ids from a run are shown as text in the
step summary (`--markdown`), the pull-request comment (`evalx comment`) and `evalx compare --markdown`, rendered here as
CommonMark with tables: no link, image or HTML of theirs, no @mention or #reference that would notify or link, no table
or code span broken. And no line of evalx's output (`evalx runs`, the summaries) can pass for a GitHub workflow command."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_project import evalx

markdown_it = pytest.importorskip("markdown_it")

PAYLOAD = (
    "p [click](https://evil.example/c) ![pixel](https://evil.example/p.png) <img src=x onerror=alert(1)> "
    "</details> @octocat @org/team #12 !3 **bold** _em_ ~~gone~~ `tick` | pipe \\| x"
)
CASE_IDS = [
    "c1 [click](https://evil.example/c) @octocat",
    "c2 ![pixel](https://evil.example/p.png) #12",
    "c3 </details><img src=x onerror=alert(1)> `x` | y",
    "::error::forged",
]


def _project(folder: Path) -> Path:
    (folder / "bot.py").write_text(f"def answer(q):\n    return {PAYLOAD!r}\n")
    cases = "\n".join(
        f"      - {{id: {json.dumps(cid)}, input: q, assert: [{{type: contains, value: zzz, name: {json.dumps('n ' + PAYLOAD)}}}]}}"
        for cid in CASE_IDS
    )
    (folder / "evalconfig.yaml").write_text(
        textwrap.dedent(
            f"""\
            version: 1
            name: {json.dumps("demo " + PAYLOAD)}
            targets: [{{id: bot, type: python, callable: bot.py:answer}}]
            datasets:
              - id: d
                cases:
            """
        )
        + cases
        + "\n"
    )
    return folder


def _rendered(markdown: str) -> str:
    return str(markdown_it.MarkdownIt("commonmark").enable("table").enable("strikethrough").render(markdown))


def _check(markdown: str, what: str) -> None:
    html = _rendered(markdown)
    assert "<a " not in html and "<img" not in html, (what, html)  # no link, no image of theirs
    assert "<strong>bold" not in html and "<em>em" not in html and "<s>gone" not in html, what
    tags = set(re.findall(r"</?([a-z0-9]+)", html))
    assert tags <= {"h2", "h3", "p", "table", "thead", "tbody", "tr", "th", "td", "strong", "code", "blockquote", "sub", "ul", "li"}, (
        what,
        tags,
    )
    text = re.sub(r"<code>.*?</code>", "", html)  # (a code span shows its text as it is, mentions and all: nothing there links)
    for ref in ("@octocat", "@org", "#12", "!3"):
        assert ref not in text, (what, ref)
    # each table row keeps its cells: a pipe in the data does not add a column
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        head = len(re.findall(r"<th[ >]", table.split("</thead>")[0]))
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.S):
            assert row.count("<td") == head, (what, row)


def test_the_step_summary_the_comment_and_compare_show_run_data_as_text(tmp_path: Path) -> None:
    project = _project(tmp_path)
    first = evalx("run", "-q", "--markdown", "summary.md", cwd=project)
    assert first.returncode == 1, first.stderr
    second = evalx("run", "-q", cwd=project)
    assert second.returncode == 1, second.stderr
    a, b = sorted((project / "runs").iterdir(), key=lambda p: p.name)
    comment = evalx("comment", str(b), "--baseline", str(a), cwd=project)
    assert comment.returncode == 0, comment.stderr
    compare = evalx("compare", str(a), str(b), "--markdown", cwd=project)
    assert compare.returncode == 0, compare.stderr
    summary = (project / "summary.md").read_text()
    assert "c1" in summary and "evil.example" in summary  # shown, as text
    for what, markdown in (("--markdown", summary), ("evalx comment", comment.stdout), ("compare --markdown", compare.stdout)):
        _check(markdown, what)


def test_no_line_of_output_passes_for_a_workflow_command(tmp_path: Path) -> None:
    project = _project(tmp_path)
    run = evalx("run", "-v", cwd=project)
    (run_dir,) = (project / "runs").iterdir()
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(run_id="::error::forged-run", name="::warning::forged-name", status="complete\n::error::forged-status")
    (run_dir / "run.json").write_text(json.dumps(meta))
    outputs = [run, evalx("runs", cwd=project), evalx("report", str(run_dir), "-v", cwd=project)]
    for done in outputs:
        for line in (done.stdout + done.stderr).splitlines():
            assert not line.lstrip().startswith("::"), line  # (evalx's own annotations are written only on GitHub Actions)
    listing = outputs[1].stdout
    assert "\\x3a:error::forged-run" in listing and "complete ::error::forged-status" in listing  # shown, on one line


@pytest.mark.parametrize("junk", [1e999, float("nan"), "<b>9</b> @octocat [l](https://evil.example)", [1, 2], {"n": 1}, -3])
def test_a_comment_of_a_summary_with_figures_that_are_not_numbers_shows_a_dash(tmp_path: Path, junk: object) -> None:
    project = _project(tmp_path)
    assert evalx("run", "-q", cwd=project).returncode == 1
    (run_dir,) = (project / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    for figures in (summary["totals"], *summary["per_target"].values()):
        for key in ("cells", "pass", "fail", "error", "pass_rate", "pass_rate_ci", "cost_usd"):
            figures[key] = junk
    summary["cost_usd"] = junk
    (run_dir / "summary.json").write_text(json.dumps(summary))  # (1e999 and NaN as Python writes them: Infinity, NaN)
    done = evalx("comment", str(run_dir))
    assert done.returncode == 0, done.stderr
    assert "| — | — · — · — ·" in done.stdout or "| **—** | — |" in done.stdout, done.stdout
    _check(done.stdout, "evalx comment")
    assert "9</b>" not in done.stdout and "inf" not in done.stdout.lower().replace("info", "")


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s.update(gates={"active": True}),
        lambda s: s.update(per_target=[1]),
        lambda s: s.update(totals="all good"),
        lambda s: s.update(comparison={"a": 1}),
        lambda s: s.update(failures=[{"x": 1}]),
    ],
)
def test_a_comment_of_a_summary_of_another_shape_is_one_line_never_an_internal_error(tmp_path: Path, damage: Any) -> None:
    project = _project(tmp_path)
    assert evalx("run", "-q", cwd=project).returncode == 1
    (run_dir,) = (project / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    damage(summary)
    (run_dir / "summary.json").write_text(json.dumps(summary))
    done = evalx("comment", str(run_dir))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "summary.json: not a summary this evalx can read" in done.stderr, done.stderr
