"""A target that is only the judge is not also run as a candidate (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

AGENTS = """
def answer(question):
    return "a kind answer"

def judge(prompt, case=None):
    return "PASS"
"""


def _project(tmp_path: Path, defaults: str = "") -> Path:
    (tmp_path / "agents.py").write_text(AGENTS, encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\n"
        + defaults
        + "targets:\n  - {id: bot, type: python, callable: agents.py:answer}\n  - {id: grader, type: python, callable: agents.py:judge}\n"
        "judge: {target: grader}\n"
        "datasets: [{id: d, cases: [{id: kind, input: hi, assert: [{type: llm_judge, rubric: Is it kind?}]}]}]\n",
        encoding="utf-8",
    )
    return config


def _targets_run(config: Path, *args: str) -> list[str]:
    result = CliRunner().invoke(main, ["run", "-q", "-c", str(config), *args])
    assert result.exit_code == 0, result.output
    run_dir = max((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return sorted({r["target"] for r in read_cells(run_dir)})


def test_the_judge_target_is_not_run_as_a_candidate(tmp_path: Path) -> None:
    config = _project(tmp_path)
    assert _targets_run(config) == ["bot"]
    assert _targets_run(config, "--target", "grader") == ["grader"]  # asked for: it runs


def test_defaults_targets_can_still_name_the_judge(tmp_path: Path) -> None:
    config = _project(tmp_path, "defaults: {targets: [bot, grader]}\n")
    assert _targets_run(config) == ["bot", "grader"]


# -- engine targets can be priced (issue 15) ---------------------------------------------------------


def test_an_engine_with_pricing_costs_its_usage(engine_server: Any, tmp_path: Path) -> None:
    from conftest import ENGINE_TEST_KEY

    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        "version: 1\ntargets:\n"
        f"  - {{id: eng, type: engine, url: '{engine_server.url}', api_key: {ENGINE_TEST_KEY},\n"
        "     pricing: {input_per_mtok: 2.0, output_per_mtok: 10.0, cached_input_per_mtok: 0.5}}\n"
        "datasets: [{id: d, cases: [{id: a, input: {message: hello}}, {id: b, input: {message: hi, scenario: echo}}]}]\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["run", "-q", "-c", str(config)])
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows = {r["case_id"]: r for r in read_cells(run_dir)}
    # 100 input tokens (40 of them cached) and 20 output: 60 x $2 + 40 x $0.5 + 20 x $10 per million
    assert rows["a"]["cost_usd"] == pytest.approx((60 * 2.0 + 40 * 0.5 + 20 * 10.0) / 1e6), result.output
    assert rows["b"]["cost_usd"] is None and rows["b"]["cost_note"] == "no usage in response"  # never a silent 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["per_target"]["eng"]["cost_usd"] == pytest.approx(rows["a"]["cost_usd"])
