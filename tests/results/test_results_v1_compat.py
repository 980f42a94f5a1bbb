"""Runs written by the v1 results format (evalx at 04be2ea) still load in every command that reads runs.

The fixtures in tests/fixtures/runs_v1/ are real runs made by that evalx
(how: tests/fixtures/runs_v1/README.md): ``stored/`` holds the runs, ``src/``
the config and agents that made them (``output.dir: ../stored``), so a copy
of the folder is a working project. Each test works on a copy in tmp_path,
through the real CLI, and checks what the command read back against what the
v1 run itself recorded (its summary.json, junit.xml and comparison).
"""

from __future__ import annotations

import json
import math
import shutil
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from evalx.cli import main
from evalx.results.model import CellResult, _CellResultKeys
from evalx.results.store import ReadProblems, read_results

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1"
#: the varied run: two python targets, two datasets, pass/fail/error/skipped, a case with repeat: 2
RUN1 = "20261126-110826-e52f15"
#: the same config again with COMPAT_MODE=2 (and --baseline RUN1): two cases newly failing, one newly passing
RUN2 = "20261126-110828-244bc5"
#: repeat: 3, a flaky case, and the cost guard (two cells not run: skip_reason)
RUN3 = "20261126-110832-b3a65c"
RUNS = (RUN1, RUN2, RUN3)
CONFIGS = {RUN1: "evalconfig.yaml", RUN2: "evalconfig.yaml", RUN3: "repeat.yaml"}

#: (target, dataset, case) newly failing / newly passing from RUN1 to RUN2 (the agents' COMPAT_MODE switch)
NEWLY_FAILING = {("bot-a", "qa", "greet"), ("bot-a", "judged", "polite-and-greets")}
NEWLY_PASSING = {("bot-a", "qa", "weather")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the fixture project (src/ + stored/), nowhere near where the runs were made."""
    dst = tmp_path / "proj"
    shutil.copytree(FIXTURES, dst, ignore=shutil.ignore_patterns("__pycache__", ".evalx"))
    return dst


def cli(*args: str | Path, mode: str = "1") -> Result:
    """``evalx ARGS`` in process; ``mode`` is the agents' COMPAT_MODE."""
    result = CliRunner(env={"COMPAT_MODE": mode}).invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert "Traceback" not in result.output, result.output
    return result


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The v1 file's lines as written (only for the committed fixtures: their format is known)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def same(a: Any, b: Any, where: str = "") -> None:
    """``a`` (read back now) holds everything ``b`` (what v1 wrote) holds, equal; floats within 1e-9 relative.

    A mapping in ``a`` may have keys ``b`` lacks (a newer evalx may add figures), never miss one.
    """
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{where}: {a!r} != {b!r}"
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict) and isinstance(b, dict):
        missing = b.keys() - a.keys()
        assert not missing, f"{where}: missing keys {sorted(missing)}"
        for k in b:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# ---------------------------------------------------------------- the reader's contract


def test_fixtures_are_v1_and_varied() -> None:
    """The fixtures are what they claim: v1 lines, every status, the optional keys, small files."""
    statuses: set[str] = set()
    optional: set[str] = set()
    for run in RUNS:
        path = FIXTURES / "stored" / run / "results.jsonl"
        assert path.stat().st_size < 60_000
        lines = lines_of(path)
        assert {line["version"] for line in lines} == {1}
        statuses |= {line["status"] for line in lines}
        optional |= {k for line in lines for k in line} - set(_CellResultKeys.__annotations__)
    assert statuses == {"pass", "fail", "error", "skipped"}
    assert {"description", "notes", "skip_reason"} <= optional


@pytest.mark.parametrize("run", RUNS)
def test_read_results_yields_every_v1_key(run: str) -> None:
    """read_results on a v1 file yields each line as the full v1 cell dict: the contract every reader relies on."""
    path = FIXTURES / "stored" / run / "results.jsonl"
    required = set(typing.get_type_hints(_CellResultKeys))
    assert required == set(CellResult.__required_keys__)
    problems = ReadProblems()
    records = list(read_results(path, problems))
    assert not problems
    written = lines_of(path)
    assert len(records) == len(written)
    for record, line in zip(records, written, strict=True):
        assert isinstance(record, dict)
        missing = required - record.keys()
        assert not missing, f"cell {record.get('index')}: missing {sorted(missing)}"
        # and the values (optional keys too: description, notes, skip_reason) are what v1 wrote
        same(dict(record), line, f"cell {line['index']}")


# ---------------------------------------------------------------- evalx report

FIGURE_KEYS = (
    "totals",
    "per_target",
    "per_category",
    "per_difficulty",
    "latency_ms",
    "ttft_ms",
    "tokens",
    "cost_usd",
    "cost_missing_cells",
    "inconclusive_assertions",
    "repeats",
    "failures",
    "failures_total",
    "pairwise",
)


@pytest.mark.parametrize("run", RUNS)
def test_report_rerenders_a_v1_run(project: Path, run: str, junit_schema: Any) -> None:
    run_dir = project / "stored" / run
    stored = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    old_junit = (run_dir / "junit.xml").read_text(encoding="utf-8")
    # the figures must come from results.jsonl, not from the stored summary: drop them there
    (run_dir / "summary.json").write_text(json.dumps({k: v for k, v in stored.items() if k not in FIGURE_KEYS}), encoding="utf-8")
    for name in ("summary.txt", "junit.xml"):
        (run_dir / name).unlink()

    result = cli("report", run_dir)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output

    rebuilt = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    for key in FIGURE_KEYS:
        same(rebuilt[key], stored[key], key)
    for target, figures in stored["per_target"].items():  # the headline figures, spelled out
        for key in ("cells", "pass", "fail", "error", "skipped", "pass_rate"):
            assert rebuilt["per_target"][target][key] == figures[key], (target, key)
        for key in ("p50", "p95", "p99"):
            assert rebuilt["per_target"][target]["latency_ms"][key] == pytest.approx(figures["latency_ms"][key]), (target, key)
    assert rebuilt["run_id"] == run and rebuilt["config"] == stored["config"]

    junit = (run_dir / "junit.xml").read_text(encoding="utf-8")
    junit_schema.validate(str(run_dir / "junit.xml"))
    from xml.etree import ElementTree as ET

    def shape(xml: str) -> list[tuple[str | None, ...]]:
        root = ET.fromstring(xml)
        rows = [tuple(root.get(a) for a in ("tests", "failures", "errors"))]
        for suite in root.iter("testsuite"):
            rows.append(tuple(suite.get(a) for a in ("name", "tests", "failures", "errors", "skipped")))
            rows += [
                (c.get("classname"), c.get("name"), ",".join(x.tag for x in c if x.tag != "system-out")) for c in suite.iter("testcase")
            ]
        return rows

    assert shape(junit) == shape(old_junit)

    text = (run_dir / "summary.txt").read_text(encoding="utf-8")
    assert f"{stored['totals']['cells']} cells" in text
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert run in html
    for row in stored["failures"]:
        assert row["case_id"] in html


# ---------------------------------------------------------------- evalx compare, evalx runs


def test_compare_two_v1_runs(project: Path) -> None:
    stored = json.loads((project / "stored" / RUN2 / "summary.json").read_text(encoding="utf-8"))["comparison"]
    result = cli("compare", "-c", project / "src/evalconfig.yaml", RUN1, RUN2, "--json")
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.stdout)
    keys = lambda rows: {(r["target"], r["dataset"], r["case_id"]) for r in rows}  # noqa: E731
    assert keys(comparison["newly_failing"]) == NEWLY_FAILING
    assert keys(comparison["newly_passing"]) == NEWLY_PASSING
    assert comparison["cells_compared"] == 16
    assert comparison["cells_only_in_baseline"] == comparison["cells_only_in_run"] == 0
    # what the v1 run itself concluded against the same baseline
    for key in ("newly_failing", "newly_passing", "per_category", "new_cases", "removed_cases", "cells_compared"):
        same(comparison[key], stored[key], key)
    same(comparison["overall"]["pass_rate"], stored["overall"]["pass_rate"], "overall.pass_rate")

    by_path = cli("compare", project / "stored" / RUN1, project / "stored" / RUN2)  # run directories, no config
    assert by_path.exit_code == 0, by_path.output
    assert "greet" in by_path.stdout and "weather" in by_path.stdout
    markdown = cli("compare", "-c", project / "src/evalconfig.yaml", RUN1, RUN2, "--markdown")
    assert markdown.exit_code == 0 and "polite-and-greets" in markdown.stdout


def test_runs_lists_v1_runs(project: Path) -> None:
    result = cli("runs", "-c", project / "src/evalconfig.yaml", "--json")
    assert result.exit_code == 0, result.output
    listed = {r["run_id"]: r for r in json.loads(result.stdout)}
    assert set(listed) == set(RUNS)
    for run in RUNS:
        stored = json.loads((project / "stored" / run / "summary.json").read_text(encoding="utf-8"))
        assert listed[run]["status"] == "complete"
        assert listed[run]["cells"] == stored["totals"]["cells"]
        assert listed[run]["pass_rate"] == pytest.approx(stored["totals"]["pass_rate"])


# ---------------------------------------------------------------- evalx run --baseline <v1 run>


def new_run(project: Path) -> Path:
    fresh = [p for p in (project / "stored").iterdir() if p.name not in RUNS]
    assert len(fresh) == 1, fresh
    return fresh[0]


def test_run_against_a_v1_baseline(project: Path) -> None:
    config = project / "src/gated.yaml"
    config.write_text(
        (project / "src/evalconfig.yaml").read_text(encoding="utf-8") + "gates:\n  no_new_failures: true\n  max_pass_rate_drop: 0.5\n",
        encoding="utf-8",
    )
    result = cli("run", "-c", config, "--baseline", RUN1, mode="2")  # the compact summary, then the comparison and gates
    assert result.exit_code == 1, result.output  # no_new_failures breaches for bot-a
    assert "vs. previous run" in result.stdout and RUN1 in result.stdout
    summary = json.loads((new_run(project) / "summary.json").read_text(encoding="utf-8"))
    comparison = summary["comparison"]
    keys = lambda rows: {(r["target"], r["dataset"], r["case_id"]) for r in rows}  # noqa: E731
    assert keys(comparison["newly_failing"]) == NEWLY_FAILING
    assert keys(comparison["newly_passing"]) == NEWLY_PASSING
    assert comparison["cells_compared"] == 16 and comparison["a"]["run_id"] == RUN1
    assert summary["baseline"]["run_id"] == RUN1
    gates = {(g["gate"], g["scope"]): g["held"] for g in summary["gates"]["results"]}
    assert gates[("no_new_failures", "target bot-a")] is False
    assert gates[("no_new_failures", "target bot-b")] is True
    assert gates[("max_pass_rate_drop", "target bot-b")] is True
    assert summary["gates"]["baseline"] == RUN1

    same_again = cli("run", "-c", project / "src/evalconfig.yaml", "--baseline", str(project / "stored" / RUN1), "-q", "--json")
    assert same_again.exit_code == 1, same_again.output  # the same failures as RUN1: no gates, so failing cells exit 1
    again = json.loads(same_again.stdout)["comparison"]
    assert again["newly_failing"] == again["newly_passing"] == [] and again["cells_compared"] == 16


# ---------------------------------------------------------------- evalx capture <v1 run>


def test_capture_from_a_v1_run(project: Path) -> None:
    out = project / "captured"
    result = cli("capture", project / "stored" / RUN1, "--case", "order", "--target", "bot-b", "--case", "crash", "--out", out)
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.yaml"))
    assert len(files) == 2, result.output
    text = "\n".join(f.read_text(encoding="utf-8") for f in files)
    assert "missing required tool call: lookup_order" in text  # bot-b's order cell failed so
    assert "Where is my order A1?" in text and "Let me check." in text
    # the captured cases load as a dataset and run
    config = project / "src/captured.yaml"
    config.write_text(
        "version: 1\nname: captured\ntargets: [{id: bot-b, type: python, callable: agent.py:bot_b}]\n"
        f"datasets: [{{id: captured, path: {out}}}]\noutput: {{dir: {project / 'captured-runs'}}}\n",
        encoding="utf-8",
    )
    validated = cli("validate", "-c", config)
    assert validated.exit_code == 0, validated.output
    ran = cli("run", "-c", config, "-q", "--json")
    assert json.loads(ran.stdout)["totals"]["cells"] == 2, ran.output


# ---------------------------------------------------------------- evalx run --resume <v1 run>


@pytest.mark.parametrize("torn", [False, True], ids=["cut", "cut-and-torn"])
def test_resume_a_v1_run(project: Path, torn: bool) -> None:
    run_dir = project / "stored" / RUN1
    path = run_dir / "results.jsonl"
    original = {line["index"]: line for line in lines_of(path)}
    raw = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept, dropped = raw[:11], raw[11:]
    path.write_text("".join(kept) + (dropped[0][: len(dropped[0]) // 2] if torn else ""), encoding="utf-8")
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    meta["status"] = "interrupted"  # as a killed run leaves it
    (run_dir / "run.json").write_text(json.dumps(meta), encoding="utf-8")

    result = cli("run", "-c", project / "src/evalconfig.yaml", "--resume", RUN1, "-q")
    assert result.exit_code == 1, result.output  # RUN1 has failing cells
    assert "11 of 16 cells have results, running 5" in result.output

    problems = ReadProblems()
    records = list(read_results(path, problems))
    assert not problems, problems.warning(path)
    indexes = [r["index"] for r in records]
    assert sorted(indexes) == list(range(16))  # every cell once: none lost, none twice
    for record in records:
        assert set(typing.get_type_hints(_CellResultKeys)) <= record.keys()
        assert record["run_id"] == RUN1
        before = original[record["index"]]
        for key in ("target", "dataset", "case_id", "repeat", "status", "category", "difficulty", "tags", "input"):
            assert record[key] == before[key], (record["index"], key)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    stored = json.loads((FIXTURES / "stored" / RUN1 / "summary.json").read_text(encoding="utf-8"))
    for key in ("cells", "pass", "fail", "error", "skipped"):
        assert summary["totals"][key] == stored["totals"][key], key
    assert not list(project.glob("stored/*/results.jsonl.tmp"))
    assert [p.name for p in (project / "stored").iterdir() if p.name not in RUNS] == []  # resumed in place, no new run


def test_compare_a_v1_run_without_its_summary(project: Path) -> None:
    """A killed v1 run has no summary.json: compare rebuilds its figures from results.jsonl alone."""
    stored = json.loads((project / "stored" / RUN1 / "summary.json").read_text(encoding="utf-8"))
    (project / "stored" / RUN1 / "summary.json").unlink()
    result = cli("compare", project / "stored" / RUN1, project / "stored" / RUN2, "--json")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    comparison = json.loads(result.stdout)
    keys = lambda rows: {(r["target"], r["dataset"], r["case_id"]) for r in rows}  # noqa: E731
    assert keys(comparison["newly_failing"]) == NEWLY_FAILING
    assert keys(comparison["newly_passing"]) == NEWLY_PASSING
    assert comparison["overall"]["pass_rate"]["a"] == pytest.approx(stored["totals"]["pass_rate"])
    for target, figures in stored["per_target"].items():
        delta = comparison["per_target"][target]
        assert delta["cells_compared"] == figures["cells"]
        assert delta["pass_rate"]["a"] == pytest.approx(figures["pass_rate"])
        assert delta["cost_usd"]["a"] == pytest.approx(figures["cost_usd"])
        assert delta["tokens_input"]["a"] == figures["tokens"]["input"]
