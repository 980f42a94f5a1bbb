"""Results format v2: compact lines and case records written by ResultWriter, read back by read_results as full cells."""

from __future__ import annotations

import json
import random
import resource
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from measured import run_measured
from results_file import read_cells

from evalx.cli import main
from evalx.results.model import RESULT_VERSION
from evalx.results.store import ReadProblems, ResultWriter, read_results
from evalx.results.summary import SummaryBuilder

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs_v1" / "stored"


def v1_cells() -> list[dict[str, Any]]:
    """Every cell of the v1 fixture runs (real runs of an older evalx), in each file's order."""
    out = []
    for path in sorted(FIXTURES.glob("*/results.jsonl")):
        out += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return out


class Spans:
    """A plan's case spans for cells given in matrix order: a case is its contiguous (dataset, case id) cells."""

    def __init__(self, cells: list[dict[str, Any]]) -> None:
        self.total = len(cells)
        self._span: list[tuple[int, int]] = []
        start = 0
        for i, cell in enumerate(cells):
            if i and (cell["dataset"], cell["case_id"]) != (cells[i - 1]["dataset"], cells[i - 1]["case_id"]):
                self._span += [(start, i - start)] * (i - start)
                start = i
        self._span += [(start, self.total - start)] * (self.total - start)

    def case_span(self, index: int) -> tuple[int, int]:
        return self._span[index]


def renumbered(cells: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The cells of one run: indexes 0..n-1 in matrix order, one run id."""
    return [{**cell, "index": i, "run_id": run_id} for i, cell in enumerate(cells)]


@pytest.mark.parametrize("order", ["matrix", "completion"])
def test_every_cell_reads_back_as_written(tmp_path: Path, order: str) -> None:
    cells = renumbered(v1_cells(), "20261126-120000-abcdef")
    assert len(cells) > 40 and {c["status"] for c in cells} == {"pass", "fail", "error", "skipped"}
    types = {c["target"]: c["target_type"] for c in cells}
    writer = ResultWriter(tmp_path, run_id="20261126-120000-abcdef", target_types=types, cases=Spans(cells), dataset=cells[0]["dataset"])
    written = list(cells)
    if order == "completion":
        random.Random(7).shuffle(written)
    for cell in written:
        writer.write(json.loads(json.dumps(cell)))
    writer.close(reorder=True)
    back = read_cells(tmp_path)
    assert [c["index"] for c in back] == list(range(len(cells)))  # the file is in matrix order after close
    for before, after in zip(cells, back, strict=True):
        assert after["version"] == RESULT_VERSION
        assert {**after, "version": 1} == before
        assert list(after) == list(before)  # every v1 key, in v1 order
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert records[0]["kind"] == "run" and records[0]["version"] == 2
    cases = [r for r in records if r.get("kind") == "case"]
    assert cases, "cases with several cells have a case record"
    for r in records[1:]:  # no line repeats the run's id, version or nulls
        assert "run_id" not in r and "version" not in r
        assert all(v is not None for k, v in r.items() if k != "score"), r
    # each case record comes right before its case's first cell
    for i, r in enumerate(records):
        if r.get("kind") == "case":
            assert records[i + 1]["index"] == r["first_index"]


def test_a_killed_file_reads_up_to_the_cut(tmp_path: Path) -> None:
    cells = renumbered(v1_cells(), "20261126-120000-abcdef")
    writer = ResultWriter(tmp_path, run_id="r", target_types={}, cases=Spans(cells))
    for cell in cells:
        writer.write(cell)
    writer.close(reorder=False)
    whole = (tmp_path / "results.jsonl").read_bytes()
    for cut in sorted(random.Random(3).sample(range(len(whole)), 40)):
        (tmp_path / "results.jsonl").write_bytes(whole[:cut])
        problems = ReadProblems()
        back = list(read_results(tmp_path / "results.jsonl", problems))
        assert [c["index"] for c in back] == list(range(len(back)))  # a prefix, never a made-up cell
        assert all(c["case_id"] == cells[c["index"]]["case_id"] and c["category"] == cells[c["index"]]["category"] for c in back)
        assert len(problems.unreadable_lines) <= 1


def test_appending_to_a_v1_file_goes_on_in_v1(tmp_path: Path) -> None:
    cells = v1_cells()[:6]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cells[:4]), encoding="utf-8")
    writer = ResultWriter(tmp_path, append=True, run_id="r", target_types={})
    for cell in cells[4:]:
        writer.write(cell)
    writer.close(reorder=False)
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines == cells  # whole lines, as an older evalx wrote them
    assert read_cells(tmp_path) == cells


def _project(root: Path, n: int, *, targets: int = 1) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            value = "nobody" if i % 50 == 7 else f"user {i}"
            f.write(
                json.dumps({"id": f"case-{i:07d}", "input": f"Say hello to user {i}", "assert": [{"type": "contains", "value": value}]})
                + "\n"
            )
    (root / "agent.py").write_text("def echo(text):\n    return 'Hello ' + text\n", encoding="utf-8")
    target_lines = "".join(f"  - {{id: echo{t}, type: python, callable: agent.py:echo}}\n" for t in range(targets))
    (root / "evalconfig.yaml").write_text(
        f"version: 1\nname: scale\ntargets:\n{target_lines}datasets:\n  - {{id: big, path: cases.jsonl}}\n", encoding="utf-8"
    )
    return root


def test_an_echo_cell_takes_under_300_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path, 2000)
    monkeypatch.chdir(root)
    res = CliRunner().invoke(main, ["run", "-q"])
    assert res.exit_code == 1, res.output  # every 50th case fails
    (run_dir,) = (root / "runs").iterdir()
    size = (run_dir / "results.jsonl").stat().st_size
    assert size / 2000 < 300, size / 2000
    cells = read_cells(run_dir)
    assert len(cells) == 2000 and sum(c["status"] == "fail" for c in cells) == 40
    assert cells[5]["input"] == "Say hello to user 5" and cells[5]["case_source"] == "cases.jsonl:6"


def test_per_case_tallies_are_not_needed_for_one_cell_a_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary built without per-case tallies (one target, no repeats) is the one built with them."""
    root = _project(tmp_path, 300)
    monkeypatch.chdir(root)
    CliRunner().invoke(main, ["run", "-q"])
    (run_dir,) = (root / "runs").iterdir()
    cells = read_cells(run_dir)
    for i, cell in enumerate(cells):  # categories and difficulties, so the per-group case counts are exercised
        cell["category"], cell["difficulty"] = f"cat{i % 3}", ("hard" if i % 4 == 0 else None)
    figures = []
    for per_case in (True, False):
        builder = SummaryBuilder("r", "n", "s", per_case=per_case)
        for cell in cells:
            builder.add(cell)  # type: ignore[arg-type]
        figures.append(builder.finish("f", 1.0))
    assert figures[0] == figures[1]


def _peak_kb(root: Path) -> int:
    """The run's own peak RSS, not pytest's (tests/measured.py)."""
    done = run_measured([sys.executable, "-m", "evalx", "run", "-q"], root, timeout_s=600)
    assert done.peak_kib, done.stderr
    return done.peak_kib


@pytest.mark.slow
@pytest.mark.skipif(resource.getrlimit(resource.RLIMIT_AS)[0] not in (resource.RLIM_INFINITY,), reason="an address-space limit")
def test_memory_does_not_grow_with_the_cells(tmp_path: Path) -> None:
    """Peak memory of a 40,000-cell run is within 25 MB of a 4,000-cell one (the results and reports stream).

    The old design kept ~1.4 KB a cell (a Case object each, every result's
    case key): 36,000 more cells were ~50 MB more.
    """
    small = _peak_kb(_project(tmp_path / "small", 4000))
    big = _peak_kb(_project(tmp_path / "big", 40000))
    assert big - small < 25_000, (small, big)


def test_started_at_reads_back_exactly_whatever_the_time() -> None:
    from datetime import datetime, timedelta, timezone

    from evalx.results.compact import Clock

    start = datetime(2026, 11, 26, 23, 59, 58, tzinfo=timezone.utc)
    clock = Clock(start)
    rng = random.Random(5)
    for _ in range(2000):  # either side of t0, across midnight and month ends
        when = start + timedelta(milliseconds=rng.randrange(-3 * 86_400_000, 40 * 86_400_000))
        text = when.isoformat(timespec="milliseconds")
        t = clock.ms_after(text)
        assert t is not None and clock.time_at(t) == text
    second = start + timedelta(milliseconds=rng.randrange(0, 86_400_000))
    for ms in [*rng.sample(range(1000), 50), 0, 999]:  # many cells within one second: the second is turned once, reused
        text = (second.replace(microsecond=0) + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
        t = clock.ms_after(text)
        assert t is not None and clock.time_at(t) == text
        assert clock.ms_after(text[:20] + "\u0661\u0662\u0663+00:00") is None  # digits, but not ASCII ones
        assert clock.ms_after(text[:20] + "1 2+00:00") is None
    for odd in (
        "2026-11-26T23:59:59.5+00:00",
        "2026-11-26T23:59:59.500+01:00",
        "2026-11-26 23:59:59.500+00:00",
        "2026-11-26T2x:59:59.500+00:00",
        7,
        None,
    ):
        assert clock.ms_after(odd) is None  # written as it is, never changed


def test_report_rebuilds_case_figures_even_when_the_stored_summary_understates_the_cells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evalx report` keeps no per-case tallies when summary.json says one cell a case; if a case turns out to have more, it reads again."""
    root = _project(tmp_path, 200)
    monkeypatch.chdir(root)
    CliRunner().invoke(main, ["run", "-q", "--repeat", "2"])
    (run_dir,) = (root / "runs").iterdir()
    stored = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert stored["totals"]["case_level"]["cases"] == 200 and stored["totals"]["cells"] == 400
    (run_dir / "summary.json").write_text(json.dumps({**stored, "repeats": None}), encoding="utf-8")
    res = CliRunner().invoke(main, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    again = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert again["totals"] == stored["totals"] and again["repeats"] == stored["repeats"]


def test_a_case_table_gives_back_every_case_as_packed() -> None:
    """Cases packed 64 to a compressed block come back equal, in any order, whatever their values."""
    import datetime

    from evalx.datasets.table import BLOCK, CaseTable
    from evalx.models import Case

    rng = random.Random(11)
    cases = [
        Case(
            id=f"c{i}",
            input=rng.choice(["hi", {"q": [1, 2.5, None]}, datetime.date(2026, 1, i % 28 + 1), "é\u2028😀"]),
            dataset="d",
            tags=["a"] * (i % 3),
            targets=["t1"] if i % 5 == 0 else None,
            repeat=i % 4 or None,
            category=f"cat{i % 7}",
            source=f"d.jsonl:{i + 1}",
            asserts=[{"type": "contains", "value": f"v{i}"}],
        )
        for i in range(3 * BLOCK + 5)
    ]
    table = CaseTable(cases)
    assert len(table) == len(cases) and list(table) == cases
    for i in rng.sample(range(len(cases)), len(cases)):  # random access across blocks, the open one included
        assert table[i] == cases[i] and table.case_id(i) == cases[i].id and table.category(i) == cases[i].category
        assert table.repeat(i) == cases[i].repeat and table.targets(i) == (tuple(cases[i].targets) if cases[i].targets else None)
    copy = table[7]
    copy.tags.append("changed")
    assert table[7] == cases[7]  # each read is a fresh case


def test_a_cell_with_every_optional_key_reads_back_in_v1_order(tmp_path: Path) -> None:
    from typing import get_type_hints

    from evalx.results.model import _CellResultKeys

    first = v1_cells()[0]
    cell = {key: first[key] for key in get_type_hints(_CellResultKeys)} | {"index": 0}
    # what cell_result adds only when it applies, in its order
    cell.update(skip_reason="budget", description="d", notes="n", stop_reason="length", truncated=True, cost_note="no usage")
    writer = ResultWriter(tmp_path, run_id=cell["run_id"], target_types={cell["target"]: cell["target_type"]})
    writer.write(json.loads(json.dumps(cell)))
    writer.close()
    (back,) = read_cells(tmp_path)
    assert list(back) == list(cell) and {**back, "version": cell["version"]} == cell


def test_values_equal_to_a_default_but_of_another_type_are_written_and_read_back(tmp_path: Path) -> None:
    """A line leaves out a key only at its default value and type: ``tags: ""``, ``case_source: []``, a score of 1 (an
    int), an assertion's ``weight: 1`` or ``reason: None`` and an output's ``tool_calls: {}`` all come back as written."""
    first = v1_cells()[0]
    cell = {**first, "index": 0, "category": "general", "tags": "", "case_source": [], "difficulty": 0, "input": 0}
    cell.update(expected=False, status="pass", score=1, cached=0, error=None)
    cell["assertions"] = [
        {"type": "a", "name": None, "passed": True, "score": 1, "reason": None, "weight": 1},
        {"type": "b", "name": "", "passed": None, "score": 0.0, "reason": "", "weight": 1.0, "details": {"x": 1}},
        "not a mapping",
    ]
    cell["output"] = {**first["output"], "text": None, "tool_calls": {}, "usage": [], "events_truncated": 0}
    writer = ResultWriter(tmp_path, run_id=cell["run_id"], target_types={cell["target"]: cell["target_type"]})
    writer.write(json.loads(json.dumps(cell)))
    writer.close()
    (back,) = read_cells(tmp_path)
    assert list(back) == list(cell) and {**back, "version": cell["version"]} == cell
    assert [list(a) for a in back["assertions"][:2]] == [list(a) for a in cell["assertions"][:2]]
    assert all(type(back[k]) is type(cell[k]) for k in ("tags", "case_source", "score", "difficulty", "input", "expected"))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"index": 1, "t": 5}\n',
        b'  {"a": 1}\n',  # leading blanks: json.loads reads it
        b'{"a": 1} \t\n',
        b'{"a": 1} {"b": 2}\n',  # extra data
        b'{"a": NaN, "b": -Infinity}\n',
        b'{"s": "\\ud800"}\n',  # a lone surrogate, escaped
        b'{"s": "caf\xc3\xa9"}\n',
        b'{"s": "\xff"}\n',  # not UTF-8
        b'{"a": [1, 2\n',  # torn
        b"[1, 2]\n",
        b"\n",
    ],
)
def test_a_results_line_parses_as_json_loads_parses_it(raw: bytes) -> None:
    import json

    from evalx.results.store import _loads_line

    def outcome(parse: Any) -> Any:
        try:
            return ("value", repr(parse(raw)))
        except ValueError as exc:
            return ("error", type(exc).__name__)

    assert outcome(_loads_line) == outcome(json.loads)


def test_a_hand_edited_line_whose_assertions_are_not_a_list_reads_back_as_written(tmp_path: Path) -> None:
    # a v2 line keeps such a value as it is (compact_cell writes it unchanged), as a v1 line does: not one "assertion" a character
    run = {"kind": "run", "version": 2, "run_id": "r", "target_types": {"t": "python"}, "defaults": {"target": "t", "dataset": "d"}}
    cell = {"index": 0, "case_id": "c", "status": "error", "assertions": "edited by hand"}
    (tmp_path / "results.jsonl").write_text(json.dumps(run) + "\n" + json.dumps(cell) + "\n", encoding="utf-8")
    (back,) = read_results(tmp_path / "results.jsonl")
    assert back["assertions"] == "edited by hand"
    assert back["target"] == "t" and back["dataset"] == "d" and back["target_type"] == "python"
