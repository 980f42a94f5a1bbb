"""Run history (`evalx runs`, `latest`) and `evalx compare` on stored runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.results.compare import compare_runs
from evalx.results.history import RunNotFound, list_runs, resolve_run

# answers depend on flips.txt: "q<N>:<pass pattern over repeats>" lines, read at call time
BOT = """
from pathlib import Path

HERE = Path(__file__).parent
seen = {}

def answer(q):
    rules = dict(line.split(":") for line in (HERE / "flips.txt").read_text().split())
    n = seen[q] = seen.get(q, -1) + 1
    pattern = rules.get(q, "1")
    ok = pattern[n % len(pattern)] == "1"
    return {"text": "yes" if ok else "no", "usage": {"input_tokens": 10, "output_tokens": 2 if ok else 4}}
"""


def project(root: Path, *, name: str = "hist", module: str = "bot") -> Path:
    (root / f"{module}.py").write_text(BOT)
    (root / "flips.txt").write_text("")
    (root / "evalconfig.yaml").write_text(
        f"version: 1\nname: {name}\ndefaults: {{concurrency: 1, repeat_pass_rule: all}}\n"
        f"targets: [{{id: bot, type: python, callable: {module}.py:answer}}]\n"
        "datasets: [{id: d, cases: [{id: q1, input: q1, assert: [{type: equals, value: 'yes'}]},\n"
        "                           {id: q2, input: q2, assert: [{type: equals, value: 'yes'}]}]}]\n"
    )
    return root


def cli(args: list[str], root: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(root)
    return CliRunner().invoke(main, args)


def test_runs_lists_newest_first_and_latest_is_the_newest_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    assert cli(["run", "-q"], root, monkeypatch).exit_code == 0
    (root / "flips.txt").write_text("q2:0\n")
    assert cli(["run", "-q"], root, monkeypatch).exit_code == 1
    listed = json.loads(cli(["runs", "--json"], root, monkeypatch).stdout)
    assert [r["pass_rate"] for r in listed] == [0.5, 1.0]  # newest first
    assert listed[0]["cells"] == 2 and listed[0]["status"] == "complete" and listed[0]["name"] == "hist"

    # an interrupted run is never `latest`; nor is the run asking for it
    newest = Path(listed[0]["path"])
    meta = json.loads((newest / "run.json").read_text())
    (newest / "run.json").write_text(json.dumps({**meta, "status": "interrupted"}))
    assert resolve_run("latest", root / "runs", name="hist") == Path(listed[1]["path"])
    with pytest.raises(RunNotFound):
        resolve_run("latest", root / "runs", name="hist", exclude=listed[1]["run_id"])
    with pytest.raises(RunNotFound, match="no completed run of 'other'"):
        resolve_run("latest", root / "runs", name="other")
    assert resolve_run(str(newest), root / "runs") == newest.resolve()  # a path works too

    table = cli(["runs"], root, monkeypatch).stdout
    header, _, first, second = table.splitlines()[:4]
    assert header.split()[:8] == ["run", "name", "status", "cells", "pass", "rate", "cost", "p99"]
    assert listed[0]["run_id"] in first and "interrupted" in first and "50.0%" in first
    assert listed[1]["run_id"] in second and "100.0%" in second


def test_runs_with_no_runs_and_other_configs_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    res = cli(["runs"], root, monkeypatch)
    assert res.exit_code == 0 and "no runs yet" in res.stderr
    assert list_runs(root / "runs", name="hist") == []


def test_compare_deltas_and_flaky_changes_with_repeats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path)
    (root / "flips.txt").write_text("q1:1 q2:0\n")
    assert cli(["run", "-q", "--repeat", "3"], root, monkeypatch).exit_code == 1
    project(root, module="bot2")  # a fresh module: call counters start again
    (root / "flips.txt").write_text("q1:110 q2:1\n")  # q1 passes 2 of 3 (flaky), q2 now passes
    assert cli(["run", "-q", "--repeat", "3"], root, monkeypatch).exit_code == 1
    a, b = (Path(r.path) for r in reversed(list_runs(root / "runs")))

    cmp = compare_runs(a, b)
    # case-level verdicts (rule "all"): q1 pass → fail, q2 fail → pass
    assert [(c["case_id"], c["passed"], c["runs"]) for c in cmp["newly_failing"]] == [("q1", 2, 3)]
    assert [(c["case_id"], c["was"]) for c in cmp["newly_passing"]] == [("q2", "fail")]
    assert cmp["newly_passing"][0]["reason"] == "equals: expected 'yes', got 'no'"  # why it used to fail
    assert [(c["case_id"], c["now_flaky"]) for c in cmp["flaky_changed"]] == [("q1", True)]
    overall = cmp["overall"]
    assert overall["pass_rate"]["a"] == pytest.approx(0.5) and overall["pass_rate"]["b"] == pytest.approx(5 / 6)
    assert overall["tokens_output"]["delta"] == (2 * 5 + 4) - (2 * 3 + 4 * 3)
    assert cmp["per_target"]["bot"]["pass_rate"]["delta"] == pytest.approx(5 / 6 - 0.5)

    text = cli(["compare", str(a), str(b)], root, monkeypatch).stdout
    assert re.search(r"pass rate +50\.0% +83\.3% +\+33\.3pp", text)
    assert "bot d/q1 [2/3 passed] — equals: expected 'yes', got 'no'" in text
    assert "Flaky status changed (1):\n  bot d/q1: now flaky (3/3 → 2/3 passed)" in text

    latest = cli(["compare", a.name, "latest"], root, monkeypatch)
    assert latest.exit_code == 0 and f"→ {b.name} (B)" in latest.stdout

    missing = cli(["compare", a.name, "nope"], root, monkeypatch)
    assert missing.exit_code == 2 and "evalx: no run 'nope'" in missing.stderr
