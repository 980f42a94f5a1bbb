"""`evalx merge` of shard runs: the same run as one process makes, and clear refusals of shards that do not belong together."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ENGINE_TEST_KEY
from engine_server import EngineServer
from identical_runs import assert_identical_runs, cell_view
from results_file import read_cells

from evalx.cli import main

AGENT = '''
def answer(question, case):
    """Deterministic: the answer depends on the input only."""
    if "crash" in question:
        raise RuntimeError("the agent crashed on purpose")
    if "refund" in question:
        return {"text": "Refunds within 30 days.", "tool_calls": [{"name": "lookup_policy", "args": {"topic": "refund"}}]}
    if "hours" in question:
        return "We are open 9 to 5, Monday to Friday, and also on some weekends when there is a sale on."
    return "I do not know: " + question
'''

CASES = """
datasets:
  - id: qa
    cases:
      - {id: refund, input: "How long is the refund window?", category: policy, assert: [{type: contains, value: "30"}]}
      - {id: hours, input: "What are the opening hours?", category: company, assert: [{type: icontains, value: "open"}, {type: max_tokens, value: 10000}]}
      - {id: weather, input: "What is the weather in Paris?", category: tools, assert: [{type: must_call_tools, tools: [web_search]}]}
      - {id: unknown, input: "Who won the cup?", category: trivia, difficulty: hard, assert: [{type: contains, value: "Paris"}]}
      - {id: crash, input: "please crash", category: trivia, assert: [{type: contains, value: "x"}]}
      - {id: judged, input: "Tell me a joke", category: style, assert: [{type: llm_judge, rubric: "is it funny?"}]}
  - id: extra
    cases:
      - {id: delete, input: "delete the file", repeat: 3, assert: [{type: must_not_call_tools, tools: [delete_file]}]}
      - {id: read, input: "read the file", targets: [agent], assert: [{type: must_call_tools, tools: [read_file]}]}
      - {id: only-rules, input: "What is the refund policy?", targets: [rules], assert: [{type: contains, value: "30"}]}
"""


def project(root: Path, engine: EngineServer | None, *, gates: str = "gates: {min_pass_rate: 0.4}\n") -> Path:
    """A deterministic project: a Python target and (with ``engine``) an engine target, repeats, cases for one target only."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    targets = "targets:\n  - {id: rules, type: python, callable: agent.py:answer}\n"
    if engine is not None:
        targets += (
            f"  - {{id: agent, type: engine, url: '{engine.url}', api_key: '${{ENGINE_KEY}}', body: {{message: '{{{{ case.input }}}}'}}}}\n"
        )
    config = root / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: sharded\ndefaults: {concurrency: 4, timeout_s: 30, retries: 0, repeat: 2}\n"
        + targets
        + textwrap.dedent(CASES)
        + gates,
        encoding="utf-8",
    )
    return config


def evalx(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    return result.exit_code, result.output


def run(config: Path, *args: str) -> tuple[int, str, Path]:
    code, output = evalx("run", "-c", str(config), "-q", *args)
    line = next(line for line in output.splitlines() if line.startswith("results: "))
    folder = Path(line.removeprefix("results: ").rstrip("/"))
    return code, output, (folder if folder.is_absolute() else Path.cwd() / folder).resolve()


def shards(config: Path, n: int, *extra: str) -> list[Path]:
    folders = []
    for i in range(1, n + 1):
        code, output, folder = run(config, "--shard", f"{i}/{n}", *extra)
        assert code in (0, 1), output
        folders.append(folder)
    return folders


def merge(config: Path, *args: str | Path) -> tuple[int, str]:
    return evalx("merge", "-c", str(config), *map(str, args))


@pytest.fixture
def engine(engine_server: EngineServer, monkeypatch: pytest.MonkeyPatch) -> EngineServer:
    monkeypatch.setenv("ENGINE_KEY", ENGINE_TEST_KEY)
    return engine_server


def test_three_shards_merged_equal_one_run(tmp_path: Path, engine: EngineServer, junit_schema: Any) -> None:
    config = project(tmp_path / "p", engine)
    code_one, out_one, one = run(config)
    parts = shards(config, 3)
    code, output = merge(config, *parts, "-o", tmp_path / "merged")
    merged = tmp_path / "merged"
    assert code == code_one, output
    assert code == 0  # with gates: the 40 % gate decides, and holds despite the failures and the errors
    assert_identical_runs(one, merged)
    cells = cell_view(merged)
    assert len(cells) == 2 * 6 * 2 + 3 * 2 + 2 + 2  # 6 cases x 2 targets x 2 repeats; delete: 3 repeats x 2; read: agent; only-rules: rules
    statuses = {c["status"] for c in cells.values()}
    assert statuses == {"pass", "fail", "error", "skipped"}
    # the merged files: one results.jsonl with the merged run's id, each cell once, in plan order
    merged_cells = read_cells(merged)
    assert [c["index"] for c in merged_cells] == sorted(c["index"] for c in merged_cells)
    assert {c["run_id"] for c in merged_cells} == {json.loads((merged / "run.json").read_text())["run_id"]}
    junit_schema.validate(str(merged / "junit.xml"))
    meta = json.loads((merged / "run.json").read_text())
    assert meta["merged"]["count"] == 3 and not meta["merged"]["partial"] and meta["merged"]["missing"] == []
    assert [s["index"] for s in meta["merged"]["shards"]] == [1, 2, 3]
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["merged"]["partial"] is False
    assert summary["gates"]["active"]
    assert summary["cells_planned"] == len(cells)
    assert "Merged from 3 of 3 shards." in (merged / "summary.txt").read_text()
    assert (merged / "report.html").is_file()
    # each shard alone: no gates, whatever its cells scored; its summary says merge applies them
    for part in parts:
        s = json.loads((part / "summary.json").read_text())
        assert "gates" not in s and s["shard"]["count"] == 3
        assert "applied by `evalx merge`" in (part / "summary.txt").read_text()


def test_merge_output_is_the_gates_verdict(tmp_path: Path) -> None:
    """With gates that hold the merge exits 0 where the shards had failures; with a strict gate it exits 1, as one run would."""
    config = project(tmp_path / "p", None, gates="gates: {min_pass_rate: 0.3}\n")
    parts = shards(config, 2)
    code, output = merge(config, *parts, "-o", tmp_path / "m1")
    _, _, one = run(config)
    assert code == json.loads((one / "run.json").read_text())["exit_code"] == 0, output
    assert 'id="scope-notice"' not in (one / "report.html").read_text(encoding="utf-8")  # a whole run needs no note
    config.write_text(config.read_text().replace("min_pass_rate: 0.3", "min_pass_rate: 0.99"))
    code, output = merge(config, *parts, "-o", tmp_path / "m2")
    assert code == 1, output
    assert "min_pass_rate" in output


def test_refuses_missing_shard_then_allow_partial(tmp_path: Path) -> None:
    config = project(tmp_path / "p", None)
    parts = shards(config, 3)
    code, output = merge(config, parts[0], parts[2], "-o", tmp_path / "m")
    assert code == 2
    assert output.strip().splitlines()[-1] == (
        f"evalx: merge: shard 2/3 missing (given: {parts[0]}, {parts[2]}); "
        "give every shard's run folder, or --allow-partial to merge these and say so"
    )
    assert not (tmp_path / "m").exists()
    code, output = merge(config, parts[0], parts[2], "-o", tmp_path / "m", "--allow-partial", "--markdown", tmp_path / "m.md")
    assert code in (0, 1), output
    assert "> ⚠️ PARTIAL: shard 2/3 missing; their cells are not in this run." in (tmp_path / "m.md").read_text()
    assert "PARTIAL: shard 2/3 missing" in output
    assert "partial merge: shard 2/3 missing" in output
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["merged"] == {
        "count": 3,
        "partial": True,
        "missing": [2],
        "missing_cells": summary["cells_planned"] - summary["totals"]["cells"],
        "shards": [
            {"index": 1, "run_id": parts[0].name, "path": str(parts[0])},
            {"index": 3, "run_id": parts[2].name, "path": str(parts[2])},
        ],
    }
    present = {k for p in (parts[0], parts[2]) for k in cell_view(p)}
    assert set(cell_view(tmp_path / "m")) == present
    assert summary["cells_planned"] > summary["totals"]["cells"]
    assert json.loads((tmp_path / "m" / "run.json").read_text())["merged"]["partial"] is True
    assert "PARTIAL" in (tmp_path / "m" / "summary.txt").read_text()
    page = (tmp_path / "m" / "report.html").read_text(encoding="utf-8")
    assert 'id="scope-notice"' in page and "PARTIAL: Merged from 2 of 3 shards" in page and "Shard 2/3 missing" in page
    shard_page = (parts[0] / "report.html").read_text(encoding="utf-8")
    assert "Shard 1/3 of a sharded run" in shard_page and "applied by `evalx merge` of every shard" in shard_page


def test_refuses_duplicate_shard(tmp_path: Path) -> None:
    config = project(tmp_path / "p", None)
    parts = shards(config, 2)
    _, _, again = run(config, "--shard", "2/2")
    code, output = merge(config, parts[0], parts[1], again)
    assert code == 2
    assert output.strip() == f"evalx: merge: {parts[1]} and {again} are both shard 2/2: give each shard once"


def test_refuses_shards_of_different_plans(tmp_path: Path) -> None:
    config = project(tmp_path / "p", None)
    first = shards(config, 2)
    code, output = merge(config, first[0], shards(config, 3)[1])
    assert code == 2
    assert "are shards of different plans" in output and str(first[0]) in output
    # the same shard count, but a case changed in between
    config.write_text(config.read_text().replace('value: "Paris"', 'value: "Rome"'))
    second = shards(config, 2)
    code, output = merge(config, first[0], second[1])
    assert code == 2
    line = output.strip()
    assert line == (
        f"evalx: merge: {first[0]} (shard 1/2) and {second[1]} (shard 2/2) are shards of different plans "
        "(the config, datasets, selection or shard count differ): merge the shards of one plan"
    )


def test_refuses_a_run_that_is_not_a_shard(tmp_path: Path) -> None:
    config = project(tmp_path / "p", None)
    _, _, whole = run(config)
    part = shards(config, 2)[0]
    code, output = merge(config, part, whole)
    assert code == 2
    assert output.strip() == f"evalx: merge: {whole} is not a shard run (it was not started with --shard I/N): only shards are merged"
    code, output = merge(config, tmp_path / "nowhere")
    assert code == 2 and "nowhere" in output and len(output.strip().splitlines()) == 1


def test_merge_into_an_existing_run_is_refused(tmp_path: Path) -> None:
    config = project(tmp_path / "p", None)
    parts = shards(config, 2)
    code, output = merge(config, *parts, "-o", parts[0])
    assert code == 2
    assert output.strip() == f"evalx: merge: {parts[0]} already holds a run; give a new folder with -o"


def test_merge_default_folder_and_latest(tmp_path: Path) -> None:
    """Without -o the merge is a new run under output.dir; shards are never `latest`, the merge is."""
    config = project(tmp_path / "p", None, gates="gates: {min_pass_rate: 0.3, baseline: latest, no_new_failures: true}\n")
    parts = shards(config, 2)
    code, output = merge(config, *parts)
    assert code == 0, output
    assert "no completed run" in output  # no baseline yet: the shards are not one
    merged = next(p for p in (config.parent / "runs").iterdir() if p not in parts)
    code, output, again = run(config)
    summary = json.loads((again / "summary.json").read_text())
    assert summary["baseline"]["run_id"] == merged.name
    code, output = evalx("runs", "-c", str(config))
    assert "shard 1/2" in output and "shard 2/2" in output


def test_a_shard_file_out_of_order_merges_the_same(tmp_path: Path) -> None:
    """A killed shard's file is in the order cells finished: merged cells are still each whole and in plan order."""
    config = project(tmp_path / "p", None)
    _, _, one = run(config)
    parts = shards(config, 2)
    path = parts[0] / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    groups: list[list[str]] = []
    for line in lines[1:]:  # after the run record: each case record with its cells, then single-cell cases
        if '"kind":"case"' in line or not groups or '"kind"' not in groups[-1][0]:
            groups.append([line])
        else:
            groups[-1].append(line)
    path.write_text(lines[0] + "".join(line for group in reversed(groups) for line in group))
    assert [c["index"] for c in read_cells(parts[0])] != sorted(c["index"] for c in read_cells(parts[0]))
    code, output = merge(config, *parts, "-o", tmp_path / "m")
    assert code == json.loads((one / "run.json").read_text())["exit_code"], output
    assert_identical_runs(one, tmp_path / "m")


def test_an_unfinished_shard_makes_an_incomplete_merge(tmp_path: Path) -> None:
    """A shard killed before its end merges with a warning naming the resume, and the merge exits 3 as one killed run would."""
    config = project(tmp_path / "p", None)
    parts = shards(config, 2)
    meta = json.loads((parts[1] / "run.json").read_text())
    meta["status"] = "running"
    (parts[1] / "run.json").write_text(json.dumps(meta))
    code, output = merge(config, *parts, "-o", tmp_path / "m")
    assert code == 3, output
    assert f"shard 2/2 ({parts[1]}) did not complete (status: running); finish it with `evalx run --resume {parts[1].name}`" in output
    assert json.loads((tmp_path / "m" / "summary.json").read_text())["interrupted"] is True


def test_pairwise_runs_inside_shards_and_merges_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case's cells are in one shard, so ``pairwise`` is judged there; the merge carries the records and the summary."""
    pytest.importorskip("evalx.execution.pairwise_pass")
    import importlib.util

    spec = importlib.util.spec_from_file_location("pairwise_judge_helpers", Path(__file__).parents[1] / "judge" / "test_pairwise_judge.py")
    assert spec is not None and spec.loader is not None
    judge_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge_module)  # the pairwise judge server and project of tests/judge (was never found: always skipped)
    server = judge_module.PairwiseJudge().start()
    try:
        root = judge_module.project(
            tmp_path / "p", server.port, cases=[{"id": f"c{i}", "input": f"q{i}"} for i in range(5)] + [{"id": "crash", "input": "crash"}]
        )
        config = root / "evalconfig.yaml"
        monkeypatch.chdir(root)
        code_one, _, one = run(config, "--no-cache")
        parts = shards(config, 3, "--no-cache")
        code, output = merge(config, *parts, "-o", tmp_path / "merged")
    finally:
        server.stop()
    assert code == code_one, output
    assert len(server.prompts) == 2 * 2 * 5  # both orders of 5 comparable cases, once in the single run and once in the shards
    assert_identical_runs(one, tmp_path / "merged")
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert summary["pairwise"][0]["judge_preference"]["compared"] == 5


def test_matrix_shards_merge_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--matrix --shard: provider variants against a fake OpenAI server, repeats; the merge equals the single run, matrix view included."""
    from matrix_project import FakeOpenAI, provider_project

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server = FakeOpenAI().start()
    try:
        config = provider_project(tmp_path, server)
        args = ("--matrix", "--target", "stable", "--target", "mini", "--repeat", "3", "--no-cache")
        code_one, out_one, one = run(config, *args)
        parts = shards(config, 2, *args)
        code, output = merge(config, *parts, "-o", tmp_path / "merged")
    finally:
        server.stop()
    assert code == code_one == 1, output  # mini at temperature 0.7 fails the refund case
    assert_identical_runs(one, tmp_path / "merged")
    summary = json.loads((tmp_path / "merged" / "summary.json").read_text())
    assert [v["id"] for v in summary["matrix"]["variants"]] == ["stable", "mini[temperature=0]", "mini[temperature=0.7]"]
    assert "Matrix: 2 cases × 3 targets" in output


def test_a_partial_merge_is_finished_by_resume(tmp_path: Path) -> None:
    """`evalx run --resume MERGED` runs the missing shards' cells into the merged run, which then equals one whole run."""
    config = project(tmp_path / "p", None)
    parts = shards(config, 3)
    code, output = merge(config, parts[0], parts[2], "--allow-partial")
    line = next(line for line in output.splitlines() if line.startswith("merged: "))
    merged = (Path.cwd() / line.removeprefix("merged: ").rstrip("/")).resolve()
    code, output = evalx("run", "-c", str(config), "-q", "--resume", merged.name)
    assert code == 0, output
    missing = len(read_cells(parts[1]))
    assert f"running {missing}" in output
    _, _, one = run(config)
    assert_identical_runs(one, merged)
    assert "merged" not in json.loads((merged / "run.json").read_text())  # now a whole run: it may be `latest`


def test_merge_renders_as_the_shards_did(tmp_path: Path, junit_schema: Any) -> None:
    """Shards run with --junit-passes summary merge into the junit.xml one such run writes (an option given to merge wins)."""
    config = project(tmp_path / "p", None)
    _, _, one = run(config, "--junit-passes", "summary")
    parts = shards(config, 2, "--junit-passes", "summary")
    code, output = merge(config, *parts, "-o", tmp_path / "m")
    assert code == 0, output
    assert_identical_runs(one, tmp_path / "m")
    assert json.loads((tmp_path / "m" / "run.json").read_text())["reports"]["junit_passes"] == "summary"
    junit_schema.validate(str(tmp_path / "m" / "junit.xml"))
    code, output = merge(config, *parts, "-o", tmp_path / "m2", "--junit-passes", "all")
    assert json.loads((tmp_path / "m2" / "run.json").read_text())["reports"]["junit_passes"] == "all"
    assert (tmp_path / "m2" / "junit.xml").read_text().count("<testcase ") > (tmp_path / "m" / "junit.xml").read_text().count("<testcase ")


def test_a_merge_with_a_shard_still_running_is_not_complete_nor_latest(tmp_path: Path) -> None:
    """Issue 30: a shard still running (part of its cells, no summary) makes a merge that says so and is never `latest`."""
    config = project(tmp_path / "p", None, gates="gates: {min_pass_rate: 0.3, no_new_failures: true}\n")
    parts = shards(config, 2)
    meta = json.loads((parts[1] / "run.json").read_text())
    meta["status"] = "running"  # as a shard still running has it: status running, no summary yet, some cells
    (parts[1] / "run.json").write_text(json.dumps(meta))
    (parts[1] / "summary.json").unlink()
    results = parts[1] / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[: len(lines) // 2]))
    held = len(read_cells(parts[0])) + len(read_cells(parts[1]))
    code, output = merge(config, *parts)
    assert code == 3, output
    planned = meta["shard"]["plan_cells"]
    assert f"incomplete merge: {planned - held} of {planned} planned cells are in no shard" in output
    folder = next(p for p in (config.parent / "runs").iterdir() if p not in parts)
    merged = json.loads((folder / "run.json").read_text())
    assert merged["status"] == "interrupted" and merged["merged"]["missing_cells"] == planned - held
    assert json.loads((folder / "summary.json").read_text())["interrupted"] is True
    code, output, again = run(config, "--baseline", "latest")
    assert "no completed run" in output, output  # the merge is not a baseline: it holds half a plan
    assert not json.loads((again / "summary.json").read_text()).get("baseline")
    code, output = evalx("runs", "-c", str(config))
    assert "interrupted (incomplete merge)" in output, output


def test_a_shard_whose_label_was_edited_is_judged_by_its_cells(tmp_path: Path) -> None:
    """Issue 30: shard 1's folder relabelled 2 never merges as '2 of 2 shards'; swapped labels are caught by the deal."""
    root = tmp_path / "p"
    root.mkdir()
    (root / "agent.py").write_text(textwrap.dedent(AGENT), encoding="utf-8")
    cases = "".join(f"      - {{id: c{i}, input: 'question {i}', assert: [{{type: contains, value: 'know'}}]}}\n" for i in range(7))
    config = root / "evalconfig.yaml"
    config.write_text(
        "version: 1\nname: labelled\ndefaults: {repeat: 2}\ntargets:\n  - {id: rules, type: python, callable: agent.py:answer}\n"
        f"datasets:\n  - id: qa\n    cases:\n{cases}",
        encoding="utf-8",
    )
    parts = shards(config, 2)
    copy = tmp_path / "copy-of-shard-1"
    import shutil

    shutil.copytree(parts[0], copy)
    meta = json.loads((copy / "run.json").read_text())
    meta["shard"]["index"] = 2
    (copy / "run.json").write_text(json.dumps(meta))
    code, output = merge(config, parts[0], copy, "-o", tmp_path / "m")
    assert code == 2, output
    assert f"merge: {parts[0]} and {copy} both hold cell " in output, output
    assert "its cells say otherwise: give each shard's own run folder once" in output
    assert not (tmp_path / "m" / "summary.json").exists()
    code, output = merge(config, copy, "-o", tmp_path / "m1", "--allow-partial")  # alone: no duplicate, still not shard 2
    assert code == 2, output
    assert f"merge: {copy}/run.json says shard 2/2, but it holds cell " in output and "its label was changed" in output, output
    for part, label in ((parts[0], 2), (parts[1], 1)):  # both labels swapped: every cell once, each in the other shard
        meta = json.loads((part / "run.json").read_text())
        meta["shard"]["index"] = label
        (part / "run.json").write_text(json.dumps(meta))
    code, output = merge(config, *parts, "-o", tmp_path / "m2")
    assert code == 2, output
    assert "which the plan deals to shard" in output and "its label was changed" in output, output


def _edit_cells(folder: Path, edit: Any) -> None:
    """Rewrite ``folder``'s results.jsonl with ``edit`` applied to each line (a JSON object)."""
    path = folder / "results.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_text("".join(json.dumps(edit(line)) + "\n" for line in lines), encoding="utf-8")


def test_shards_of_another_config_or_version_or_with_edited_case_ids_are_refused(tmp_path: Path) -> None:
    """Issue 30: a merge's cells come from one config version, each the cell its index names. A shard of another
    config with the same plan, a shard run under other settings (a timeout: not part of the plan), and shards whose
    cells swapped case ids (each index still in its own shard) all merged as one run."""
    import shutil

    config = project(tmp_path / "p", None)
    parts = shards(config, 2)
    other = project(tmp_path / "q", None)
    other.write_text(other.read_text().replace("name: sharded", "name: another"), encoding="utf-8")
    code, output = merge(config, parts[0], shards(other, 2)[1], "-o", tmp_path / "m1")
    assert code == 2 and "is a run of config 'another', not of 'sharded'" in output, output
    config.write_text(config.read_text().replace("timeout_s: 30", "timeout_s: 5"), encoding="utf-8")
    code, output = merge(config, parts[0], shards(config, 2)[1], "-o", tmp_path / "m2")
    assert code == 2 and "ran different versions of the config" in output, output
    config.write_text(config.read_text().replace("timeout_s: 5", "timeout_s: 30"), encoding="utf-8")
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(parts[0], first)
    shutil.copytree(parts[1], second)
    one = next(c["case_id"] for c in read_cells(parts[0]))
    two = next(c["case_id"] for c in read_cells(parts[1]))
    swap = {one: two, two: one}
    for folder in (first, second):
        _edit_cells(folder, lambda line: {**line, "case_id": swap.get(line.get("case_id"), line.get("case_id"))})
    code, output = merge(config, first, second, "-o", tmp_path / "m3")
    assert code == 2, output
    assert f"holds cell 0 as case qa/{two}, target rules, repeat 0, but the plan's cell 0 is case qa/{one}" in output, output
    assert not (tmp_path / "m3" / "summary.json").exists()
    code, output = merge(config, *parts, "-o", tmp_path / "m4")  # the shards as they ran still merge
    assert code in (0, 1) and (tmp_path / "m4" / "summary.json").is_file(), output


def test_review_marks_of_a_shard_carry_to_the_merge_for_its_own_cases(tmp_path: Path) -> None:
    """Issue 30: the merge read the shards raw and dropped their review marks: a verdict a reviewer overrode in a
    shard counted as the run's own again. Each shard's marks for its own cases are the merged run's; a mark a shard's
    folder holds for another shard's case was never about that output and is left out."""
    from evalx.results.reviews import add_mark

    config = project(tmp_path / "p", None)
    parts = shards(config, 2)
    mine = next(c for c in read_cells(parts[0]) if c["status"] == "fail")
    theirs = next(c for c in read_cells(parts[1]) if c["status"] == "fail")
    add_mark(parts[0], target=mine["target"], dataset=mine["dataset"], case_id=mine["case_id"], verdict="pass", comment="fine")
    add_mark(parts[0], target=theirs["target"], dataset=theirs["dataset"], case_id=theirs["case_id"], verdict="pass")
    code, output = merge(config, *parts, "-o", tmp_path / "m")
    assert code in (0, 1), output
    merged = {(c["case_id"], c["repeat"]): c for c in read_cells(tmp_path / "m")}
    assert merged[(mine["case_id"], 0)]["status"] == "pass" and merged[(mine["case_id"], 0)]["review"]["comment"] == "fine"
    assert merged[(theirs["case_id"], 0)]["status"] == "fail" and "review" not in merged[(theirs["case_id"], 0)]
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["reviews"]["marks"] == 1 and summary["reviews"]["overridden_cells"] == 2  # both repeats of the case
    assert summary["totals"]["pass"] == sum(c["status"] == "pass" for c in merged.values())
