"""``evalx run --tag NAME`` (repeatable: any of them; ``!NAME`` leaves cases out), recorded and re-applied by ``--resume``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

CI = Path(__file__).resolve().parents[2] / "examples" / "ci"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    (tmp_path / "bot.py").write_text("def answer(q):\n    return q\n")
    return write_config(
        tmp_path,
        "targets: [{id: bot, type: python, callable: bot.py:answer}]\n",
        """
        datasets:
          - id: d
            cases:
              - {id: a, input: alpha, tags: [quick], assert: [{type: contains, value: alpha}]}
              - {id: b, input: beta, tags: [quick, slow], assert: [{type: contains, value: beta}]}
              - {id: c, input: gamma, tags: [slow], assert: [{type: contains, value: gamma}]}
              - {id: d, input: delta, assert: [{type: contains, value: delta}]}
        """,
    )


def ran(run_dir: Path) -> list[str]:
    return sorted(c["case_id"] for c in read_cells(run_dir))


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["quick"], ["a", "b"]),
        (["quick", "slow"], ["a", "b", "c"]),  # repeated: any of them
        (["!slow"], ["a", "d"]),
        (["quick", "!slow"], ["a"]),
    ],
)
def test_tags_select_cases(config: Path, tags: list[str], expected: list[str]) -> None:
    args = [a for t in tags for a in ("--tag", t)]
    code, output, run = run_cli(config, "-q", *args)
    assert code == 0, output
    assert ran(run) == expected
    meta = json.loads((run / "run.json").read_text())
    assert meta["selection"]["tags"] == tags
    assert meta["selection_args"]["tags"] == tags


def test_tags_combine_with_category_and_case(config: Path) -> None:
    code, output, run = run_cli(config, "-q", "--tag", "quick", "--case", "b*")
    assert code == 0, output
    assert ran(run) == ["b"]


def test_a_tag_that_selects_nothing_is_a_usage_error(config: Path) -> None:
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", "--tag", "nightly"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == "evalx: --tag nightly selects no cell: nothing to run"
    assert not (config.parent / "runs").exists() or not any((config.parent / "runs").iterdir())


def test_dry_run_lists_only_the_tagged_cells(config: Path) -> None:
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--dry-run", "--tag", "!quick"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("2 cells: 2 cases")
    assert "d/c" in result.output and "d/d" in result.output and "d/a" not in result.output


def test_resume_reapplies_the_tags(config: Path) -> None:
    code, output, run = run_cli(config, "-q", "--tag", "slow")
    assert code == 0, output
    # forget one cell's result: the resume runs it again, within the tagged selection only
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    cells = [line for line in lines if '"case_id"' in line]
    (run / "results.jsonl").write_text("".join(line for line in lines if line is not cells[-1]))
    result = CliRunner().invoke(main, ["run", "-c", str(config), "-q", "--resume", run.name])
    assert result.exit_code == 0, result.output
    assert "1 of 2 cells have results, running 1" in result.output
    assert ran(run) == ["b", "c"]


def test_the_ci_example_runs_the_quick_suite_on_pull_requests_and_everything_nightly() -> None:
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text(encoding="utf-8"))
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on:` as a boolean
    assert triggers["schedule"] and "pull_request" in triggers
    runs: dict[str, list[list[str]]] = {}
    for job_id, job in workflow["jobs"].items():
        for step in job["steps"]:
            if str(step.get("uses", "")).split("@")[0].endswith("/evalx"):  # evalx's action: `evalx run ... <args>`
                runs.setdefault(job_id, []).append(["evalx", "run", *shlex.split(str(step.get("with", {}).get("args", "")))])
    quick = [args for job in runs.values() for args in job if "--tag" in args]
    assert quick and all(args[args.index("--tag") + 1] == "quick" for args in quick)
    nightly = [job_id for job_id, job in workflow["jobs"].items() if job.get("if") == "github.event_name == 'schedule'"]
    assert nightly and all("--tag" not in args for job_id in nightly for args in runs[job_id])
    for job in runs.values():  # each is a valid `evalx run` command line
        for args in job:
            command = main.commands[args[1]]
            command.make_context(args[1], args[2:])
