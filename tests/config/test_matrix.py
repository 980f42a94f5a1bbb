"""`evalx run --matrix`: expansion (GitHub-Actions semantics), validation, dry-run, the terminal matrix view, end to end."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from matrix_project import FakeOpenAI, provider_project
from results_file import read_cells

from evalx.cli import main
from evalx.config.loader import load_config
from evalx.config.matrix import combinations, expand, variant_id
from evalx.errors import ConfigError
from evalx.execution.plan import Selection, build_plan
from evalx.reports.matrix_view import format_matrix
from evalx.results.summary import SummaryBuilder

# --------------------------------------------------------------- expansion


def test_github_actions_include_example() -> None:
    # the example of GitHub's "Expanding or adding matrix configurations" docs, with its documented result
    params = {"fruit": ["apple", "pear"], "animal": ["cat", "dog"]}
    include = [
        {"color": "green"},
        {"color": "pink", "animal": "cat"},
        {"fruit": "apple", "shape": "circle"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]
    assert combinations(params, include) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"},
        {"fruit": "banana", "animal": "cat"},
    ]


def test_product_exclude_include() -> None:
    params = {"model": ["a", "b"], "temperature": [0, 0.7]}
    # exclude drops combinations matching every key of an entry
    assert combinations(params, exclude=[{"model": "b", "temperature": 0.7}]) == [
        {"model": "a", "temperature": 0},
        {"model": "a", "temperature": 0.7},
        {"model": "b", "temperature": 0},
    ]
    # a partial exclude entry drops every combination it matches
    assert combinations(params, exclude=[{"temperature": 0}]) == [{"model": "a", "temperature": 0.7}, {"model": "b", "temperature": 0.7}]
    # include: extends the combinations it fits (an extra key), never overwrites an axis value...
    extended = combinations(params, include=[{"model": "b", "max_tokens": 256}])
    assert extended[2:] == [{"model": "b", "temperature": 0, "max_tokens": 256}, {"model": "b", "temperature": 0.7, "max_tokens": 256}]
    assert "max_tokens" not in extended[0]
    # ... and a combination it cannot fit without overwriting becomes a new one
    assert combinations(params, include=[{"model": "c", "temperature": 1}])[-1] == {"model": "c", "temperature": 1}
    # excluded first, then included back: GitHub's order
    assert {"model": "b", "temperature": 0.7} in combinations(
        params, include=[{"model": "b", "temperature": 0.7}], exclude=[{"model": "b"}]
    )
    # duplicates collapse; bools never equal numbers (YAML true is not 1)
    assert combinations({"t": [0, 0]}) == [{"t": 0}]
    assert combinations({"t": [1, True]}, exclude=[{"t": True}]) == [{"t": 1}]
    # no axes: each include entry is a combination
    assert combinations({}, include=[{"model": "a"}, {"model": "b", "temperature": 1}]) == [
        {"model": "a"},
        {"model": "b", "temperature": 1},
    ]


def test_variant_ids_are_readable_and_deterministic() -> None:
    assert variant_id("mini", {"temperature": 0.7}) == "mini[temperature=0.7]"
    # model first, then the other keys alphabetically, whatever order the axes were written in
    assert variant_id("mini", {"temperature": 0, "model": "gpt-4.1"}) == "mini[model=gpt-4.1,temperature=0]"
    assert variant_id("mini", {"top_p": 1, "model": "m", "max_tokens": 5}) == "mini[model=m,max_tokens=5,top_p=1]"
    assert variant_id("mini", {"stop": ["\n"], "json": True, "seed": None}) == 'mini[json=true,seed=null,stop=["\\n"]]'
    assert variant_id("mini", {}) == "mini"


def test_expand_applies_model_and_params_to_provider_targets_only() -> None:
    mini = {"id": "mini", "type": "provider", "provider": "openai", "model": "gpt-4o-mini", "params": {"temperature": 0, "max_tokens": 64}}
    rules = {"id": "rules", "type": "python", "callable": "a:b"}
    variants = expand(
        [rules, mini],
        {"params": {"model": ["gpt-4o-mini", "gpt-4.1"], "temperature": [0, 0.7]}, "exclude": [{"model": "gpt-4.1", "temperature": 0.7}]},
    )
    assert [v.id for v in variants] == [
        "rules",
        "mini[model=gpt-4o-mini,temperature=0]",
        "mini[model=gpt-4o-mini,temperature=0.7]",
        "mini[model=gpt-4.1,temperature=0]",
    ]
    assert variants[0].spec == rules and variants[0].values == {}
    last = variants[3]
    assert last.target == "mini" and last.values == {"model": "gpt-4.1", "temperature": 0}
    assert last.spec == {**mini, "id": last.id, "model": "gpt-4.1", "params": {"temperature": 0, "max_tokens": 64}}
    assert variants[2].spec["params"] == {"temperature": 0.7, "max_tokens": 64}
    assert mini["params"] == {"temperature": 0, "max_tokens": 64} and mini["model"] == "gpt-4o-mini"  # not mutated
    # no axes and no include: every target runs once, unchanged
    assert [v.id for v in expand([rules, mini], {"targets": ["rules", "mini"]})] == ["rules", "mini"]


# --------------------------------------------------------------- validation

TARGETS = """\
targets:
  - {id: rules, type: python, callable: agent.py:answer}
  - {id: mini, type: provider, provider: openai, model: gpt-4o-mini}
datasets:
  - id: smoke
    cases: [{id: a, input: hi, assert: [{type: contains, value: hi}]}]
"""


def write_config(tmp_path: Path, text: str) -> Path:
    (tmp_path / "agent.py").write_text("def answer(q):\n    return q\n")
    path = tmp_path / "evalconfig.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config_errors(tmp_path: Path, matrix: str) -> list[str]:
    path = write_config(tmp_path, "version: 1\n" + TARGETS + textwrap.dedent(matrix))
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    return [str(i).replace(str(path), "F") for i in exc.value.issues]


def test_empty_axis(tmp_path: Path) -> None:
    errors = config_errors(tmp_path, "matrix:\n  targets: [mini]\n  params:\n    temperature: []\n")
    assert errors == ["F:11 matrix.params.temperature: axis 'temperature' is empty: list at least one value"]


def test_axis_that_applies_to_no_listed_target(tmp_path: Path) -> None:
    errors = config_errors(tmp_path, "matrix:\n  targets: [rules]\n  params:\n    temperature: [0, 0.7]\n")
    assert errors == [
        "F:11 matrix.params.temperature: axis 'temperature' applies to no target: matrix.targets lists only python targets, "
        "which take no params; axes set a provider target's model and params"
    ]


def test_exclude_and_include_keys_must_name_axes(tmp_path: Path) -> None:
    errors = config_errors(
        tmp_path,
        """\
        matrix:
          targets: [rules, mini]
          params:
            temperature: [0, 0.7]
            model: [gpt-4o-mini, 5]
          exclude:
            - {temprature: 0.7}
            - {}
          include:
            - {top_k: 5}
            - {model: gpt-4.1, temperatur: 1}
        """,
    )
    assert errors == [
        "F:12 matrix.params.model[1]: a model must be a string, not 5",
        "F:14 matrix.exclude[0].temprature: exclude key 'temprature' names no axis (axes: temperature, model) (did you mean 'temperature'?)",
        "F:15 matrix.exclude[1]: an empty exclude entry would drop every combination",
        "F:17 matrix.include[0]: include entry names no axis (axes: temperature, model); "
        "it would extend every combination — set such params on the target instead",
        "F:18 matrix.include[1].temperatur: include key 'temperatur' names no axis (did you mean 'temperature'?)",
    ]


def test_exclude_that_removes_everything(tmp_path: Path) -> None:
    errors = config_errors(tmp_path, "matrix:\n  targets: [mini]\n  params: {temperature: [0]}\n  exclude: [{temperature: 0}]\n")
    assert errors == ["F:11 matrix.exclude: exclude removes every combination: nothing would run"]


def test_valid_matrix_and_extra_include_params(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "version: 1\n" + TARGETS + "matrix:\n  targets: [rules, mini]\n  params: {temperature: [0, 0.7]}\n"
        "  include: [{temperature: 0.7, max_tokens: 99}]\n",
    )
    config = load_config(path)
    plan = build_plan(config, Selection(matrix=True))
    assert list(plan.variants) == ["rules", "mini[temperature=0]", "mini[max_tokens=99,temperature=0.7]"]
    assert plan.target_specs[2]["params"] == {"temperature": 0.7, "max_tokens": 99}
    assert plan.base_target_ids == ["rules", "mini"]
    # without --matrix: the default targets, no variants
    plain = build_plan(config, Selection())
    assert [t["id"] for t in plain.target_specs] == ["rules", "mini"] and plain.variants == {}


def test_dataset_targets_apply_to_variants(tmp_path: Path) -> None:
    text = "version: 1\n" + TARGETS.replace("  - id: smoke\n", "  - id: smoke\n    targets: [mini]\n")
    path = write_config(tmp_path, text + "matrix:\n  targets: [rules, mini]\n  params: {temperature: [0, 1]}\n")
    plan = build_plan(load_config(path), Selection(matrix=True))
    assert [c.target for c in plan.cells] == ["mini[temperature=0]", "mini[temperature=1]"]


def test_dry_run_lists_the_variants(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        "version: 1\n" + TARGETS + "matrix:\n  targets: [rules, mini]\n  params: {model: [m1, m2], temperature: [0, 0.7]}\n"
        "  exclude: [{model: m2, temperature: 0.7}]\n",
    )
    res = CliRunner().invoke(main, ["run", "-c", str(path), "--matrix", "--repeat", "2", "--dry-run"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("8 cells: 1 cases × 4 targets (rules, mini[model=m1,temperature=0], ")
    assert lines[1:6] == [
        "matrix: 2 targets → 4 variants",
        "  rules  (takes no params: runs once, as is)",
        "  mini[model=m1,temperature=0]",
        "  mini[model=m1,temperature=0.7]",
        "  mini[model=m2,temperature=0]",
    ]
    plain = CliRunner().invoke(main, ["run", "-c", str(path), "--dry-run"])
    assert plain.output.startswith("2 cells: 1 cases × 2 targets (rules, mini)") and "matrix:" not in plain.output


# --------------------------------------------------------------- terminal view

RUN_ID = "20261126-101500-a1b2c3"


def cell(
    target: str, case_id: str, status: str, index: int, repeat: int = 0, latency: float = 100.0, cost: float | None = None
) -> dict[str, Any]:
    return {
        "version": 1, "run_id": RUN_ID, "index": index, "target": target, "dataset": "golden", "case_id": case_id,
        "repeat": repeat, "category": "billing", "difficulty": None, "status": status, "assertions": [],
        "output": {"text": "x"}, "latency_ms": latency, "cost_usd": cost, "error": None,
    }  # fmt: skip


def summarise(results: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    builder = SummaryBuilder(RUN_ID, "matrix", "now", **kw)
    for r in results:
        builder.add(r)
    return builder.finish("later", 1.0)


def three_targets() -> list[dict[str, Any]]:
    # 8 cases × 3 targets, one run each; "new" passes every case, "old" only the first two,
    # "mini[temperature=0.7]" errors on case 0 and passes the rest but case 7 (skipped)
    plan = {
        "old": ["pass", "pass", "fail", "fail", "fail", "fail", "fail", "fail"],
        "new": ["pass"] * 8,
        "mini[temperature=0.7]": ["error", "pass", "pass", "pass", "pass", "pass", "pass", "skipped"],
    }
    out, index = [], 0
    for case in range(8):
        for target, statuses in plan.items():
            out.append(
                cell(
                    target,
                    f"case-{case}",
                    statuses[case],
                    index,
                    latency=10.0 * (case + 1),
                    cost=0.001 if target.startswith("mini") else None,
                )
            )
            index += 1
    return out


def test_table_for_a_three_target_run() -> None:
    results = three_targets()
    text = format_matrix(summarise(results), results, width=200)
    lines = text.splitlines()
    assert lines[0] == "Matrix: 8 cases × 3 targets"
    header = next(i for i, line in enumerate(lines) if line.startswith("case "))
    assert lines[header].split() == ["case", "old", "new", "mini"]
    assert lines[header + 1].split() == ["[temperature=0.7]"]  # the params on a second header line
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 3 : header + 11]}
    assert rows["case-0"] == ["✓", "✓", "E"]
    assert rows["case-2"] == ["✗", "✓", "✓"]
    assert rows["case-7"] == ["✗", "✓", "–"]
    footer = {line.split("  ")[0]: line for line in lines if line.startswith(("pass rate", "95% CI", "cost", "p50", "p99"))}
    # old 2/8 = 25%, Wilson (2, 8) = 7.1–59.1%; new 8/8; mini 6/7 decided (skipped excluded)
    assert footer["pass rate"].split()[2:] == ["25.0%", "100.0%", "85.7%"]
    assert footer["95% CI"].split()[2:] == ["7.1–59.1%", "67.6–100.0%", "48.7–97.4%"]
    # 8 cells at $0.001: "$0.00800" (three significant digits under a cent), $0.008 / 6 passes = $0.00133 a pass
    assert footer["cost"].split()[1:] == ["—", "—", "$0.00800"]
    assert next(line for line in lines if line.startswith("cost / pass")).split()[3:] == ["—", "—", "$0.00133"]
    assert footer["p50"].split()[1:] == ["45ms"] * 3
    pairwise = text[text.index("Pairwise (3 pairs;") :]
    assert "Holm-adjusted over 3 pairs" in pairwise.replace("\n", " ")
    # old vs new over 8 cases: only new passes 6 → p = 2 × 1/2^6 = 0.03125; Holm over 3 pairs: the smallest
    # of 0.03125, 0.0625, 1 is multiplied by 3 → 0.09375: no longer a win (it was one, unadjusted)
    assert (
        "  old vs new → no clear difference\n"
        "    8 cases comparable, 0 not comparable · old wins 0 · new wins 6 · ties 2\n"
        "    pass rate old 25.0% · new 100.0% · difference -75.0 pts (95% CI -92.9 to -28.0 pts, unadjusted)\n"
        "    p = 0.0312 · Holm-adjusted p = 0.0938\n"
    ) in pairwise
    # old vs mini: case 0 (mini errored) and case 7 (mini inconclusive) are not comparable, so mini's error
    # is no win for old: only mini passes 5 of the 6 → p = 2/2^5 = 0.0625, × 2 (Holm's second step) = 0.125
    assert (
        "  old vs mini[temperature=0.7] → no clear difference\n"
        "    6 cases comparable, 2 not comparable · old wins 0 · mini[temperature=0.7] wins 5 · ties 1\n"
    ) in pairwise
    assert "    p = 0.0625 · Holm-adjusted p = 0.125\n" in pairwise
    assert "  new vs mini[temperature=0.7] → no clear difference\n    6 cases comparable, 2 not comparable" in pairwise
    assert "…" not in text
    assert "Flaky" not in text  # no repeats: no flaky section


def test_table_with_repeats_shows_k_of_n() -> None:
    results = []
    for index, (case, outcomes) in enumerate((("steady", "pppp"), ("wobbly", "pfpp"), ("broken", "ffpf"))):
        for r, o in enumerate(outcomes):
            results.append(cell("bot", case, "pass" if o == "p" else "fail", index * 4 + r, repeat=r))
    text = format_matrix(summarise(results), results, width=200)
    assert "up to 4 runs a case, a case passes by repeat_pass_rule: majority" in text
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in text.splitlines() if line.startswith(("steady", "wobbly", "broken"))}
    assert rows == {"steady": "4/4 ✓", "wobbly": "3/4 ✓", "broken": "1/4 ✗"}
    assert "  bot  golden/wobbly  3/4  passes" in text and "  bot  golden/broken  1/4  fails" in text
    # the rule comes from the summary: with "all", 3/4 fails
    strict = format_matrix(summarise(results, repeat_pass_rule="all"), results, width=200)
    assert "3/4 ✗" in strict


def test_wide_matrix_switches_to_a_per_target_summary() -> None:
    results = three_targets()
    summary = summarise(results)
    text = format_matrix(summary, results, width=40)
    assert "figures per target instead" in text and "wider than this terminal's 40" in text
    assert "case-0" not in text
    target_rows = [line.split()[0] for line in text.splitlines()[3:6]]
    assert target_rows == ["old", "new", "mini[temperature=0.7]"]


def test_long_variant_ids_wrap_in_the_header_never_cut() -> None:
    long_id = "assistant[model=a-very-long-model-name-2025-preview,temperature=0.7]"
    results = [cell(long_id, "a", "pass", 0), cell("b", "a", "pass", 1)]
    text = format_matrix(summarise(results), results, width=200)
    assert "…" not in text
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("case "))
    header = [line.split() for line in lines[top : top + 4]]
    # the base, then each param on its own line; a part wider than a column (22) wraps whole
    assert header == [["case", "assistant", "b"], ["[model=a-very-long-mod"], ["el-name-2025-preview,"], ["temperature=0.7]"]]
    assert max(len(part) for row in header for part in row) <= 22


# --------------------------------------------------------------- end to end, with a provider


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


def test_matrix_run_with_repeats_end_to_end(tmp_path: Path, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "120")  # the case × target table (82 columns) fits, whatever terminal runs the tests
    config = provider_project(tmp_path, fake_openai)
    res = CliRunner().invoke(main, ["run", "-c", str(config), "--matrix", "--repeat", "4", "--no-cache"])
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = read_cells(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    # 4 variants × 2 cases × 4 repeats
    variants = ["stable", "flaky", "mini[temperature=0]", "mini[temperature=0.7]"]
    assert len(results) == 32 and list(summary["per_target"]) == variants
    assert [v["id"] for v in summary["matrix"]["variants"]] == variants
    assert sorted({r["temperature"] for r in fake_openai.requests}) == [0, 0.7] and len(fake_openai.requests) == 16
    assert summary["version"] == 2 and summary["repeat_pass_rule"] == "majority"
    # flaky: refund 3/4 (passes by majority); mini at 0.7: refund 0/4 (fails)
    assert summary["repeats"]["flaky"] == [
        {"target": "flaky", "dataset": "qa", "case_id": "refund", "passed": 3, "runs": 4, "status": "pass"}
    ]
    assert summary["per_target"]["mini[temperature=0.7]"]["case_level"]["fail"] == 1
    assert summary["per_target"]["mini[temperature=0.7]"]["cost_usd_stats"]["cells"] == 8
    out = res.output
    assert "Matrix: 2 cases × 4 targets · up to 4 runs a case" in out
    row = next(line for line in out.splitlines() if line.startswith("refund"))
    assert row.split() == ["refund", "4/4", "✓", "3/4", "✓", "4/4", "✓", "0/4", "✗"]
    assert "95% CI" in out and "  flaky  qa/refund  3/4  passes" in out
    assert (
        "  stable vs flaky → no clear difference\n    2 cases comparable, 0 not comparable · stable wins 0 · flaky wins 0 · ties 2" in out
    )
    assert res.exit_code == 1  # mini at 0.7 fails the refund case
    # the JUnit file: one testcase per case and variant, the flaky one carries <flakyFailure>
    junit = (run_dir / "junit.xml").read_text()
    assert junit.count("<testcase ") == 8 and junit.count("<flakyFailure ") == 1

    # plain `evalx run` on the same config: the default targets only
    res = CliRunner().invoke(main, ["run", "-c", str(config), "--repeat", "4"])
    (newest,) = [p for p in (tmp_path / "runs").iterdir() if p != run_dir]
    plain = json.loads((newest / "summary.json").read_text())
    assert list(plain["per_target"]) == ["stable"] and plain["matrix"] is None and res.exit_code == 0
    assert "Matrix:" not in res.output
