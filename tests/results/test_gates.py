"""Gates, baselines, the CI Markdown summary and the cost guard, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

# a bot whose answers come from mode.txt, so two runs can differ case by case
BOT = """
from pathlib import Path

def answer(q):
    mode = (Path(__file__).parent / "mode.txt").read_text().strip()
    good = {"A": {"alpha"}, "B": {"beta"}, "AB": {"alpha", "beta"}}[mode]
    return {"text": "right" if q in good else "wrong", "usage": {"input_tokens": 10, "output_tokens": 5}, "cost_usd": 0.01}
"""

CASES = """
datasets:
  - id: d
    cases:
      - {id: alpha, input: alpha, category: core, assert: [{type: equals, value: right}]}
      - {id: beta, input: beta, category: extra, assert: [{type: equals, value: right}]}
"""


def project(tmp_path: Path, gates: str = "", defaults: str = "") -> Path:
    (tmp_path / "bot.py").write_text(BOT)
    (tmp_path / "mode.txt").write_text("A")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: gated\n" + defaults + "targets: [{id: bot, type: python, callable: bot.py:answer}]\n" + CASES + gates
    )
    return tmp_path


def cli(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args, env=env)


def newest_summary(root: Path) -> dict:  # type: ignore[type-arg]
    runs = sorted((root / "runs").iterdir(), key=lambda p: json.loads((p / "run.json").read_text())["started_unix"])
    return json.loads((runs[-1] / "summary.json").read_text())


GATES = """
gates:
  baseline: latest
  min_pass_rate: 0.5
  max_pass_rate_drop: 0.0
  no_new_failures: true
"""


def test_swapped_failure_breaks_no_new_failures_and_compare_lists_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, GATES)
    first = cli(["run"], root, monkeypatch)
    # first run on a branch: no baseline is a warning, and the gates that need none still decide
    assert first.exit_code == 0, first.output
    assert "warning: no completed run of 'gated'" in first.stderr
    assert "baseline gates are skipped" in first.stderr
    assert "Traceback" not in first.output

    (root / "mode.txt").write_text("B")  # alpha now fails, beta now passes: the same 50%
    second = cli(["run"], root, monkeypatch)
    assert second.exit_code == 1, second.output
    out = second.stdout
    assert "vs. previous run" in out and "Pass rate: 50.0% → 50.0% (no change)" in out
    assert "✗ no_new_failures" in out and "BREACHED" in out and "bot d/alpha" in out
    assert "✓ max_pass_rate_drop" in out and "✓ min_pass_rate" in out
    summary = newest_summary(root)
    gates = {r["gate"]: r for r in summary["gates"]["results"]}
    assert gates["no_new_failures"]["held"] is False and gates["no_new_failures"]["value"] == 1
    assert gates["min_pass_rate"]["held"] is True
    assert summary["gates"]["passed"] is False
    # the baseline block the HTML report reads
    assert summary["baseline"]["pass_rate"] == 0.5
    assert [c["case_id"] for c in summary["baseline"]["newly_failing"]] == ["alpha"]
    assert [c["case_id"] for c in summary["baseline"]["newly_passing"]] == ["beta"]
    run_dir = root / "runs" / summary["run_id"]
    assert "no_new_failures" in (run_dir / "summary.txt").read_text()

    runs = [p.name for p in sorted((root / "runs").iterdir(), key=lambda p: json.loads((p / "run.json").read_text())["started_unix"])]
    cmp = cli(["compare", runs[0], runs[1]], root, monkeypatch)
    assert cmp.exit_code == 0, cmp.output
    assert "Newly failing (1):\n  bot d/alpha" in cmp.stdout
    assert "equals: expected 'right', got 'wrong'" in cmp.stdout
    assert "Newly passing (1):\n  bot d/beta" in cmp.stdout
    as_json = json.loads(cli(["compare", runs[0], runs[1], "--json"], root, monkeypatch).stdout)
    assert as_json["overall"]["pass_rate"]["delta"] == 0
    assert [c["case_id"] for c in as_json["newly_failing"]] == ["alpha"]
    md = cli(["compare", runs[0], runs[1], "--markdown"], root, monkeypatch).stdout
    assert "**Newly failing (1)**" in md and "| bot | d/alpha |" in md and "**Newly passing (1)**" in md


def test_gates_decide_the_exit_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "gates: {min_pass_rate: 0.5}\n")
    held = cli(["run"], root, monkeypatch)
    assert held.exit_code == 0, held.output  # one case fails, but the gate holds: the gates decide
    assert "✓ min_pass_rate" in held.stdout and "Gates: all held" in held.stdout

    (root / "evalconfig.yaml").write_text((root / "evalconfig.yaml").read_text().replace("0.5", "0.75"))
    breached = cli(["run", "--json"], root, monkeypatch)
    assert breached.exit_code == 1
    gate = json.loads(breached.stdout)["gates"]["results"][0]
    assert (gate["gate"], gate["value"], gate["threshold"], gate["held"]) == ("min_pass_rate", 0.5, 0.75, False)


def test_per_target_and_per_category_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gates = "gates:\n  min_pass_rate: 0.9\n  targets: {bot: {min_pass_rate: 0.5}}\n  categories: {core: {min_pass_rate: 1.0}, extra: {min_pass_rate: 1.0}}\n"
    root = project(tmp_path, gates)
    res = cli(["run", "--json"], root, monkeypatch)
    results = {(r["gate"], r["scope"]): r for r in json.loads(res.stdout)["gates"]["results"]}
    assert results[("min_pass_rate", "target bot")]["held"] is True  # the override replaced 0.9
    assert results[("min_pass_rate", "target bot")]["threshold"] == 0.5
    assert results[("min_pass_rate", "category core")]["held"] is True  # alpha passes in mode A
    assert results[("min_pass_rate", "category extra")]["held"] is False
    assert res.exit_code == 1


def test_cost_and_explicit_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "gates: {max_cost_increase: 0.1}\n")
    first = cli(["run"], root, monkeypatch)
    base_id = next((root / "runs").iterdir()).name
    assert first.exit_code == 0
    (root / "bot.py").write_text(BOT.replace("0.01", "0.02"))
    # same process: the module is cached by path, so point the target at a copy
    (root / "bot2.py").write_text(BOT.replace("0.01", "0.02"))
    (root / "evalconfig.yaml").write_text((root / "evalconfig.yaml").read_text().replace("bot.py:answer", "bot2.py:answer"))
    res = cli(["run", "--baseline", base_id], root, monkeypatch)
    assert res.exit_code == 1, res.output
    assert "✗ max_cost_increase" in res.stdout and "+100.0%" in res.stdout
    missing = cli(["run", "--baseline", "no-such-run"], root, monkeypatch)
    assert "warning: no run 'no-such-run'" in missing.stderr and "Traceback" not in missing.output


def test_markdown_summary_and_github_step_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "gates: {min_pass_rate: 0.9}\n")
    (root / "bot.py").write_text(BOT.replace('"wrong"', '"<script>x|y</script>"'))
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    res = cli(["run", "--markdown", "out/summary.md"], root, monkeypatch, env={"GITHUB_STEP_SUMMARY": str(step)})
    assert res.exit_code == 1
    md = (root / "out/summary.md").read_text()
    assert md.startswith("## ❌ evalx run")
    assert "**Pass rate 50.0%**" in md
    assert "| `min_pass_rate` | target bot | ❌ breached |" in md
    assert "d/beta" in md and "<script>" not in md and "&lt;script&gt;x\\|y" in md
    assert step.read_text() == "earlier step\n" + md + "\n"  # appended, never overwritten


def test_cost_guard_skips_the_rest_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = "".join(f"      - {{id: c{i}, input: alpha, assert: [{{type: equals, value: right}}]}}\n" for i in range(5))
    root = project(tmp_path, defaults="defaults: {concurrency: 1, max_total_cost: 0.025}\n")
    text = (root / "evalconfig.yaml").read_text()
    (root / "evalconfig.yaml").write_text(text[: text.index("datasets:")] + "datasets:\n  - id: d\n    cases:\n" + cases)
    res = cli(["run"], root, monkeypatch)
    assert res.exit_code == 1, res.output
    assert "cost guard: spend $0.0200 reached defaults.max_total_cost $0.0250; 3 cells not run" in res.output
    run_dir = next((root / "runs").iterdir())
    rows = read_cells(run_dir)
    assert [r["status"] for r in rows] == ["pass", "pass", "skipped", "skipped", "skipped"]  # nothing silently missing
    assert rows[2]["skip_reason"].startswith("not run: spend $0.0200")
    assert "not run: spend" in (run_dir / "junit.xml").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost_guard"]["skipped"] == 3 and summary["totals"]["skipped"] == 3


def test_dry_run_estimates_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, defaults="defaults: {max_total_cost: 0.0001}\n")
    text = (
        (root / "evalconfig.yaml")
        .read_text()
        .replace(
            "targets: [{id: bot, type: python, callable: bot.py:answer}]",
            "targets:\n  - {id: bot, type: python, callable: bot.py:answer}\n"
            "  - {id: mini, type: provider, provider: openai, model: my-model, api_key: x, params: {max_tokens: 100},\n"
            "     pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n",
        )
    )
    (root / "evalconfig.yaml").write_text(text)
    res = cli(["run", "--dry-run"], root, monkeypatch)
    assert res.exit_code == 0, res.output
    assert "bot                  2 cells  — no price known for python targets" in res.stdout
    # 2 cells × 100 output tokens at $2/Mtok = $0.0004, plus a few input tokens at $1/Mtok
    line = next(line for line in res.stdout.splitlines() if line.strip().startswith("mini") and "cells" in line)
    assert "200 out" in line and "≤ $0.0004" in line
    assert "the run may stop early" in res.stdout
    assert not (root / "runs").exists()


# -- baselines compare the cells both runs have; nothing graded never passes; floors ---------------


def test_a_quick_run_against_a_full_baseline_compares_the_shared_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, GATES)
    assert cli(["run"], root, monkeypatch).exit_code == 0  # mode A: alpha passes, beta fails (50 % >= 50 %, the baseline)
    quick = cli(["run", "--category", "extra"], root, monkeypatch)  # beta only: it failed before too
    summary = newest_summary(root)
    comparison = summary["comparison"]
    assert comparison["cells_compared"] == 1 and comparison["cells_only_in_baseline"] == 1 and comparison["cells_only_in_run"] == 0
    assert comparison["overall"]["pass_rate"]["a"] == 0.0 and comparison["overall"]["pass_rate"]["b"] == 0.0  # not 50 % → 0 %
    gates = {r["gate"]: r for r in summary["gates"]["results"]}
    assert gates["max_pass_rate_drop"]["held"] is True and gates["no_new_failures"]["held"] is True
    assert "on 1 shared cell" in gates["max_pass_rate_drop"]["detail"]
    assert "on 1 graded cell" in gates["min_pass_rate"]["detail"]
    assert gates["min_pass_rate"]["held"] is False and quick.exit_code == 1  # 0 % < 50 %: a real breach, still caught
    assert "on 1 shared cell" in quick.output


SKIPPING = """
datasets:
  - id: d
    cases:
      - {id: kind, input: alpha, assert: [{type: llm_judge, rubric: "Is it kind?"}]}
      - {id: also, input: beta, assert: [{type: llm_judge, rubric: "Is it kind?"}]}
"""


def test_a_run_where_nothing_was_graded_exits_1_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "gates:\n  min_pass_rate: 0.5\n")
    (root / "evalconfig.yaml").write_text((root / "evalconfig.yaml").read_text().replace(CASES, SKIPPING))
    result = cli(["run"], root, monkeypatch)
    assert result.exit_code == 1, result.output  # no judge: every cell skipped, the gates held on nothing
    assert "nothing was graded: of 2 cells, 2 were skipped and 0 errored" in result.output
    assert newest_summary(root)["totals"]["skipped"] == 2


def test_max_skipped_rate_breaches_when_too_many_cells_were_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project(tmp_path, "gates:\n  max_skipped_rate: 0.25\n")
    cases = CASES.replace("assert: [{type: equals, value: right}]}\n", 'assert: [{type: llm_judge, rubric: "Kind?"}]}\n', 1)
    (root / "evalconfig.yaml").write_text((root / "evalconfig.yaml").read_text().replace(CASES, cases))
    (root / "mode.txt").write_text("AB")
    result = cli(["run"], root, monkeypatch)
    assert result.exit_code == 1, result.output
    (gate,) = newest_summary(root)["gates"]["results"]
    assert gate["gate"] == "max_skipped_rate" and gate["held"] is False and gate["value"] == 0.5
    assert gate["detail"] == "1 of 2 cells skipped (50.0%, max 25.0%)"


def _comparison(metric: str, a: float, b: float) -> dict:  # type: ignore[type-arg]
    m = {"a": a, "b": b, "delta": b - a, "relative": (b - a) / a if a else None}
    none = {"a": None, "b": None, "delta": None, "relative": None}
    entry = {"in_a": True, "in_b": True, "cells_compared": 10, "pass_rate": none, "cost_usd": none, "p99_ms": none, metric: m}
    return {"a": {"run_id": "base"}, "per_target": {"t": entry}, "newly_failing": []}


@pytest.mark.parametrize(
    ("gate", "threshold", "metric", "a", "b", "held"),
    [
        ("max_p99_increase", 0.2, "p99_ms", 5.0, 8.0, True),  # +60 % but +3 ms: noise under the 50 ms default floor
        ("max_p99_increase", 0.2, "p99_ms", 100.0, 400.0, False),
        ("max_p99_increase", {"ratio": 0.2, "min_ms": 1}, "p99_ms", 5.0, 8.0, False),
        ("max_p99_increase", {"ratio": 0.2, "min_ms": 500}, "p99_ms", 100.0, 400.0, True),
        ("max_p99_increase", 0.5, "p99_ms", 1000.0, 1400.0, True),  # +400 ms but only +40 %
        ("max_cost_increase", 0.1, "cost_usd", 0.001, 0.002, True),  # doubled, by a tenth of a cent
        ("max_cost_increase", 0.1, "cost_usd", 0.10, 0.20, False),
        ("max_cost_increase", {"ratio": 0.1, "min_usd": 0.0001}, "cost_usd", 0.001, 0.002, False),
        ("max_cost_increase", 0.1, "cost_usd", 0.0, 0.05, False),  # from nothing: no ratio, the floor decides
    ],
)
def test_latency_and_cost_gates_need_the_ratio_and_the_floor(
    gate: str, threshold: object, metric: str, a: float, b: float, held: bool
) -> None:
    from evalx.results.gates import evaluate

    figures = {"per_target": {"t": {"cells": 10, "pass": 10, "fail": 0, "error": 0, "skipped": 0, "pass_rate": 1.0}}}
    report = evaluate({gate: threshold}, figures, _comparison(metric, a, b))  # type: ignore[arg-type]
    (result,) = report["results"]
    assert result["held"] is held, result
    assert result["detail"].endswith("on 10 shared cells")
