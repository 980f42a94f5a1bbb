"""``evalx run --rerun failed|errors --from RUN``: a new run that runs again only what failed, and counts the whole suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _fake_llm import OPENAI_KEY, Canned, FakeLLMServer, fast_backoff, server  # noqa: F401  (fixtures)
from cli_project import run_cli, write_config
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main

PATH = "/v1/chat/completions"


def project(folder: Path, server: FakeLLMServer, refund_expects: str = "60 days", gates: str = "") -> Path:
    return write_config(
        folder,
        f"""
        defaults: {{retries: 0, concurrency: 1, cache: false}}
        targets:
          - id: mini
            type: provider
            provider: openai
            model: gpt-4o-mini
            base_url: '{server.url}/v1'
            api_key: {OPENAI_KEY}
        {gates}
        """,
        f"""
        datasets:
          - id: d
            cases:
              - {{id: sum, input: 'What is 2 + 2?', assert: [{{type: contains, value: '4'}}]}}
              - {{id: capital, input: 'What is the capital of France?', assert: [{{type: contains, value: Paris}}]}}
              - {{id: refund, input: 'How long for a refund?', repeat: 2, assert: [{{type: contains, value: '{refund_expects}'}}]}}
        """,
    )


def statuses(run_dir: Path) -> dict[tuple[str, int], str]:
    return {(c["case_id"], c["repeat"]): c["status"] for c in read_cells(run_dir)}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", *args])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


@pytest.fixture
def parent(tmp_path: Path, server: FakeLLMServer) -> tuple[Path, Path]:
    config = project(tmp_path, server)
    server.script(Canned(400, {"error": {"message": "bad request, once"}}))  # the first cell (sum) errors
    code, output, run_dir = run_cli(config, "-q")
    assert code == 1, output
    assert server.count(PATH) == 4
    assert statuses(run_dir) == {("sum", 0): "error", ("capital", 0): "pass", ("refund", 0): "fail", ("refund", 1): "fail"}
    return config, run_dir


def test_rerun_failed_calls_the_server_only_for_the_failed_cells(parent: tuple[Path, Path], server: FakeLLMServer) -> None:
    config, first = parent
    code, output = invoke("-c", str(config), "-q", "--json", "--rerun", "failed", "--from", first.name)
    assert code == 1, output
    assert server.count(PATH) == 4 + 2  # both repeats of the failing case, nothing else
    assert f"rerunning 2 of 4 cells of {first.name} (failed)" in output
    runs = sorted(p for p in (config.parent / "runs").iterdir() if p != first)
    assert len(runs) == 1
    second = runs[0]
    meta = json.loads((second / "run.json").read_text())
    assert meta["parent"] == first.name and meta["rerun"] == ["failed"] and meta["status"] == "complete"
    assert "resumed_at" not in meta
    assert statuses(second) == statuses(first)  # the error was copied, the failures ran again (and failed again)
    assert {c["run_id"] for c in read_cells(second)} == {second.name}
    summary = json.loads((second / "summary.json").read_text())
    assert summary["run_id"] == second.name
    assert summary["totals"]["cells"] == 4, summary["totals"]
    assert (summary["totals"]["pass"], summary["totals"]["fail"], summary["totals"]["error"]) == (1, 2, 1)
    junit = (second / "junit.xml").read_text()
    assert junit.count("<testcase ") == 3  # the whole suite, not only what ran again


def test_rerun_errors_then_both_from_latest(parent: tuple[Path, Path], server: FakeLLMServer) -> None:
    config, first = parent
    code, output = invoke("-c", str(config), "-q", "--rerun", "errors", "--from", str(first))  # a path works too
    assert code == 1, output
    assert server.count(PATH) == 5
    second = max((p for p in (config.parent / "runs").iterdir() if p != first), key=lambda p: p.name)
    assert statuses(second)[("sum", 0)] == "pass"
    code, output = invoke("-c", str(config), "-q", "--rerun", "errors,failed", "--from", "latest")
    assert code == 1, output
    assert server.count(PATH) == 7  # latest is the errors rerun: only refund's two repeats
    (third,) = [p for p in (config.parent / "runs").iterdir() if p not in (first, second)]  # (ids in one second do not sort by time)
    meta = json.loads((third / "run.json").read_text())
    assert meta["parent"] == second.name and meta["rerun"] == ["failed", "errors"]


def test_nothing_to_rerun_exits_0_without_a_run(parent: tuple[Path, Path], server: FakeLLMServer) -> None:
    config, first = parent
    code, output = invoke("-c", str(config), "-q", "--rerun", "errors", "--from", first.name)
    assert code == 1
    second = max((p for p in (config.parent / "runs").iterdir() if p != first), key=lambda p: p.name)
    before = len(list((config.parent / "runs").iterdir()))
    code, output = invoke("-c", str(config), "-q", "--rerun", "errors", "--from", second.name)
    assert code == 0, output
    assert output.strip() == f"evalx: nothing to rerun: run {second.name} has no errors cells"
    assert len(list((config.parent / "runs").iterdir())) == before


def test_a_changed_plan_is_refused_in_one_line(parent: tuple[Path, Path], server: FakeLLMServer, tmp_path: Path) -> None:
    config, first = parent
    project(tmp_path, server, refund_expects="30 days")  # the cells' assertions changed
    code, output = invoke("-c", str(config), "-q", "--rerun", "failed", "--from", first.name)
    assert code == 2
    assert output.strip() == (
        f"evalx: cannot rerun from {first.name}: the config or datasets changed in ways that alter its cells; "
        "restore them, or start a new run"
    )
    assert server.count(PATH) == 4


def test_an_unrelated_config_change_is_allowed(parent: tuple[Path, Path], server: FakeLLMServer, tmp_path: Path) -> None:
    config, first = parent
    project(tmp_path, server, gates="gates: {min_pass_rate: 0.1}")
    code, output = invoke("-c", str(config), "-q", "--rerun", "failed", "--from", first.name)
    assert server.count(PATH) == 6
    assert code == 0, output  # the gates of the config as it is now decide (25% >= 10%)
    second = max((p for p in (config.parent / "runs").iterdir() if p != first), key=lambda p: p.name)
    assert json.loads((second / "summary.json").read_text())["gates"]["passed"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rerun", "failed"], "evalx: --rerun and --from go together (and not with --resume)"),
        (["--from", "latest"], "evalx: --rerun and --from go together (and not with --resume)"),
        (["--rerun", "flaky", "--from", "latest"], "evalx: --rerun flaky: give failed, errors or failed,errors"),
        (["--rerun", "failed", "--from", "nope"], "evalx: --from: no run 'nope'"),
        (["--rerun", "failed", "--from", "latest", "--case", "sum"], "evalx: --rerun runs the plan of"),
    ],
)
def test_bad_rerun_options(parent: tuple[Path, Path], args: list[str], message: str) -> None:
    config, _ = parent
    code, output = invoke("-c", str(config), "-q", *args)
    assert code == 2
    assert output.strip().startswith(message), output


def test_a_rerun_that_was_cut_short_resumes_and_keeps_its_parent(parent: tuple[Path, Path], server: FakeLLMServer) -> None:
    config, first = parent
    code, output = invoke("-c", str(config), "-q", "--rerun", "failed", "--from", first.name)
    assert code == 1, output
    (second,) = [p for p in (config.parent / "runs").iterdir() if p != first]
    lines = (second / "results.jsonl").read_text().splitlines(keepends=True)
    (second / "results.jsonl").write_text("".join(lines[:-1]))  # the last cell (refund, repeat 1) never finished
    code, output = invoke("-c", str(config), "-q", "--resume", second.name)
    assert code == 1, output
    assert server.count(PATH) == 4 + 2 + 1
    assert "resuming" in output and "3 of 4 cells have results, running 1" in output
    meta = json.loads((second / "run.json").read_text())
    assert meta["parent"] == first.name and meta["rerun"] == ["failed"] and len(meta["resumed_at"]) == 1
    assert statuses(second) == statuses(first)


def test_dry_run_lists_only_the_cells_a_rerun_would_run(parent: tuple[Path, Path], server: FakeLLMServer) -> None:
    config, first = parent
    code, output = invoke("-c", str(config), "--dry-run", "--rerun", "failed", "--from", first.name)
    assert code == 0, output
    assert output.startswith("2 cells: 1 cases × 1 targets (mini)")
    assert "d/refund" in output and "d/sum" not in output
    assert server.count(PATH) == 4 and len(list((config.parent / "runs").iterdir())) == 1
