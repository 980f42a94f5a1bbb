"""`evalx run --shard I/N`: a deterministic, balanced split of the plan by whole cases; what a shard run records and skips."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells
from test_merge import evalx, merge, project, run

from evalx.cli import main
from evalx.config.loader import load_config
from evalx.execution.plan import Selection, build_plan
from evalx.execution.shards import ShardError, case_key, deal, parse_shard
from evalx.targets.settings import Overrides, resolve_settings


def uniform_project(root: Path, n_cases: int, *, targets: int = 2, repeat: int = 2, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "bot.py").write_text("def answer(q):\n    return 'ok ' + q\n")
    tlines = "".join(f"  - {{id: t{i}, type: python, callable: bot.py:answer}}\n" for i in range(targets))
    cases = "".join(f"      - {{id: c{i:03d}, input: q{i}, assert: [{{type: contains, value: ok}}]}}\n" for i in range(n_cases))
    config = root / "evalconfig.yaml"
    config.write_text(
        f"version: 1\nname: uniform\ndefaults: {{repeat: {repeat}, concurrency: 4}}\n{extra}targets:\n{tlines}datasets:\n  - id: d\n    cases:\n{cases}",
        encoding="utf-8",
    )
    return config


# ---------------------------------------------------------------- the split


def test_every_cell_in_exactly_one_shard_with_its_case(tmp_path: Path) -> None:
    config = load_config(project(tmp_path, None))
    whole = build_plan(config, Selection())
    keys = {c.index: (c.target, c.dataset, c.case.id, c.repeat) for c in whole.cells}
    for n in (1, 2, 3, 5, 12, 40):
        owner: dict[int, int] = {}
        case_shard: dict[tuple[str, str], int] = {}
        for i in range(1, n + 1):
            part = build_plan(config, Selection(shard=(i, n)))
            cells = list(part.cells)
            assert len(part.cells) == len(cells)
            assert sum(len(part.cells_for(t["id"])) for t in part.target_specs) == len(cells)
            for cell in cells:
                assert cell.index not in owner
                owner[cell.index] = i
                assert keys[cell.index] == (cell.target, cell.dataset, cell.case.id, cell.repeat)  # the whole plan's index
                # every target and repeat of a case in the same shard
                assert case_shard.setdefault((cell.dataset, cell.case.id), i) == i
        assert set(owner) == set(keys), n


def test_balanced_when_cases_have_equal_cells(tmp_path: Path) -> None:
    config = load_config(uniform_project(tmp_path, 23))
    for n in (2, 3, 4, 7, 23):
        sizes = [len(build_plan(config, Selection(shard=(i, n))).cells) for i in range(1, n + 1)]
        assert sum(sizes) == 23 * 2 * 2
        assert max(sizes) - min(sizes) <= 4, (n, sizes)  # one case: 2 targets x 2 repeats


def reference_deal(keys: list[bytes], cells: list[int], count: int) -> list[int]:
    """The rule as docs/scale-out.md states it, by hand: most cells first, then by key, each to the emptiest shard."""
    loads = [0] * count
    owner = [0] * len(keys)
    for k in sorted(range(len(keys)), key=lambda k: (-cells[k], keys[k])):
        shard = min(range(count), key=lambda s: (loads[s], s))
        owner[k] = shard
        loads[shard] += cells[k]
    return owner


def test_deal_balances_unequal_cases_greedily() -> None:
    sizes = [9, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4]
    keys = [case_key("d", f"c{i}") for i in range(len(sizes))]
    owner = deal(keys, sizes, 3)
    loads: Counter[int] = Counter()
    for cells, shard in zip(sizes, owner):
        loads[shard] += cells
    assert sorted(loads.values()) == [8, 9, 9]  # 26 cells: the 9-cell case alone, the rest spread around it
    assert owner == reference_deal(keys, sizes, 3)


@pytest.mark.parametrize("sizes", [[4] * 17, [1] * 5, [3, 3, 1, 2, 6, 6, 6, 1], [2] * 9 + [5], []])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_deal_follows_the_documented_rule(sizes: list[int], count: int) -> None:
    keys = [case_key("ds", f"case-{i}") for i in range(len(sizes))]
    assert deal(keys, sizes, count) == reference_deal(keys, sizes, count)


def test_the_split_is_pinned_and_the_same_in_another_process(tmp_path: Path) -> None:
    """The digest, not hash(): the same cases go to the same shards in every process and Python version."""
    assert case_key("golden-qa", "refund-window") == hashlib.blake2b(b"golden-qa\x1frefund-window", digest_size=8).digest()
    keys = [case_key("d", f"c{i:03d}") for i in range(12)]
    here = deal(keys, [4] * 12, 5)
    script = (
        "from evalx.execution.shards import case_key, deal\nprint(deal([case_key('d', f'c{i:03d}') for i in range(12)], [4] * 12, 5))\n"
    )
    for seed in ("0", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed}
        )
        assert json.loads(out.stdout) == here
    # pinned: a change of the dealing is a change of every stored shard's meaning
    assert here == [1, 1, 0, 2, 0, 1, 2, 3, 0, 3, 4, 4]
    assert sorted(Counter(here).values()) == [2, 2, 2, 3, 3]
    assert deal(keys, [1, 2, 3] * 4, 3) == reference_deal(keys, [1, 2, 3] * 4, 3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0/3", "--shard 0/3: the shard's number must be from 1 to the number of shards (e.g. --shard 1/3)"),
        ("4/3", "--shard 4/3: the shard's number must be from 1 to the number of shards (e.g. --shard 1/3)"),
        ("1/0", "--shard 1/0: the shard's number must be from 1 to the number of shards (e.g. --shard 1/3)"),
        ("x/y", "--shard x/y: expected I/N, the shard's number and the number of shards (e.g. --shard 1/3)"),
        ("2", "--shard 2: expected I/N, the shard's number and the number of shards (e.g. --shard 1/3)"),
        ("-1/3", "--shard -1/3: expected I/N, the shard's number and the number of shards (e.g. --shard 1/3)"),
    ],
)
def test_bad_shard_values(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(ShardError) as caught:
        parse_shard(value)
    assert str(caught.value) == message
    config = uniform_project(tmp_path, 2)
    result = CliRunner().invoke(main, ["run", "-c", str(config), "--shard", value])
    assert result.exit_code == 2
    assert result.output == f"evalx: {message}\n"
    assert not (tmp_path / "runs").exists()


def test_parse_shard_accepts_spaces() -> None:
    assert parse_shard(" 2 / 5 ") == (2, 5)
    assert parse_shard("1/1") == (1, 1)


# ---------------------------------------------------------------- a shard run


def test_shard_run_records_the_whole_plan(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 6)
    _, _, whole = run(config)
    code, output, part = run(config, "--shard", "2/3")
    assert code == 0, output
    meta = json.loads((part / "run.json").read_text())
    whole_meta = json.loads((whole / "run.json").read_text())
    assert meta["shard"]["index"] == 2 and meta["shard"]["count"] == 3
    assert meta["shard"]["plan_digest"] == whole_meta["plan_digest"] == meta["plan_digest"]
    assert meta["shard"]["plan_cells"] == whole_meta["cells"] == 24
    assert meta["shard"]["plan_cases"] == 6
    assert meta["cells"] == 8 == len(read_cells(part))
    assert meta["selection_args"]["shard"] == [2, 3]
    summary = json.loads((part / "summary.json").read_text())
    assert summary["shard"] == {"index": 2, "count": 3, "plan_cells": 24}
    assert summary["totals"]["cells"] == 8


def test_shard_has_no_gates_and_exits_0_on_failures(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 6, extra="gates: {min_pass_rate: 1.0}\n")
    config.write_text(config.read_text().replace("value: ok", "value: nope"))  # every cell fails
    code, output, one = run(config)
    assert code == 1
    code, output, part = run(config, "--shard", "1/2", "--markdown", str(tmp_path / "shard.md"))
    assert code == 0, output
    markdown = (tmp_path / "shard.md").read_text()
    assert markdown.startswith("## 🧩 evalx run") and "Shard 1/2: gates and the baseline are applied by `evalx merge`" in markdown
    summary = json.loads((part / "summary.json").read_text())
    assert "gates" not in summary and summary["totals"]["fail"] == 12
    assert "gates and the baseline are applied by `evalx merge` of every shard" in output
    code, output = merge(config, part, run(config, "--shard", "2/2")[2], "-o", tmp_path / "m")
    assert code == 1 and "min_pass_rate" in output


def folder_of(output: str) -> Path:
    return Path(next(line for line in output.splitlines() if line.startswith("results: ")).removeprefix("results: ").rstrip("/"))


def test_empty_shard_exits_0_and_says_so(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 2)
    codes = {}
    for i in range(1, 5):
        code, output, folder = run(config, "--shard", f"{i}/4")
        codes[i] = (code, len(read_cells(folder)), output)
    empty = [i for i, (_, cells, _) in codes.items() if cells == 0]
    assert len(empty) == 2
    for i in empty:
        code, _, output = codes[i]
        assert code == 0
        assert f"shard {i}/4 is empty: the plan's 2 cases went to the other shards" in output
        assert f"exit 0: shard {i}/4 ran; gates and the baseline are applied by `evalx merge` of every shard" in output  # -q: the reason
        assert "It is empty: the plan has fewer cases than shards." in (folder_of(output) / "summary.txt").read_text()
    folders = sorted((tmp_path / "runs").iterdir())
    code, output = merge(config, *folders, "-o", tmp_path / "m")
    assert code == 0, output
    assert len(read_cells(tmp_path / "m")) == 8


def test_resume_of_a_shard_keeps_its_shard(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 9)
    code, output, part = run(config, "--shard", "3/3")
    cells = read_cells(part)
    assert len(cells) == 12
    # as if killed after three cells: the first lines kept, the status left running
    lines = (part / "results.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in lines if '"kind"' in line or '"index"' in line][:5]
    (part / "results.jsonl").write_text("".join(kept))
    meta = json.loads((part / "run.json").read_text())
    meta["status"] = "running"
    (part / "run.json").write_text(json.dumps(meta))
    left = len(read_cells(part))
    assert 0 < left < 12
    code, output = evalx("run", "-c", str(config), "-q", "--resume", part.name)
    assert code == 0, output
    assert f"running {12 - left}" in output
    resumed = read_cells(part)
    assert sorted(c["index"] for c in resumed) == sorted(c["index"] for c in cells)
    assert json.loads((part / "run.json").read_text())["shard"]["index"] == 3
    # the resumed shard merges with the others
    others = [run(config, "--shard", f"{i}/3")[2] for i in (1, 2)]
    code, output = merge(config, *others, part, "-o", tmp_path / "m")
    assert code == 0, output
    assert len(read_cells(tmp_path / "m")) == 36
    # --resume with another shard is refused: a resume runs the run's own selection
    code, output = evalx("run", "-c", str(config), "-q", "--resume", part.name, "--shard", "1/3")
    assert code == 2 and "runs that run's own selection" in output


def test_dry_run_lists_only_the_shard(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 6)
    code, output = evalx("run", "-c", str(config), "--dry-run", "--shard", "1/3")
    assert code == 0, output
    assert output.startswith("8 cells: 2 cases × 2 targets")


def test_cost_limit_and_rate_limits_are_shared(tmp_path: Path) -> None:
    """max_total_cost and each rate_limit are divided by the number of shards."""
    settings = resolve_settings({"type": "provider", "rate_limit": {"rpm": 600}}, {}, Overrides(rate_limit_share=3))
    assert settings.rate_limit_rpm == 200
    assert resolve_settings({"type": "provider", "rate_limit": {"rpm": 600}}, {}, Overrides()).rate_limit_rpm == 600
    assert resolve_settings({"type": "provider"}, {}, Overrides(rate_limit_share=3)).rate_limit_rpm is None
    config = uniform_project(tmp_path, 4, extra="")
    config.write_text(config.read_text().replace("defaults: {", "defaults: {max_total_cost: 0.9, "))
    code, output, part = run(config, "--shard", "1/3")
    summary = json.loads((part / "summary.json").read_text())
    assert summary["cost_guard"]["limit_usd"] == pytest.approx(0.3)


def test_shards_are_never_latest(tmp_path: Path) -> None:
    config = uniform_project(tmp_path, 4, extra="gates: {baseline: latest, no_new_failures: true}\n")
    _, _, first = run(config)
    run(config, "--shard", "1/2")
    code, output, later = run(config)
    summary = json.loads((later / "summary.json").read_text())
    assert summary["baseline"]["run_id"] == first.name
