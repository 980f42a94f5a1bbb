"""A big JSONL dataset read in two processes (evalx.datasets.split): the same table, the same errors, as one process."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from evalx.datasets import split
from evalx.datasets.loader import load_dataset
from evalx.datasets.table import BLOCK, case_digest
from evalx.errors import DatasetError


def _write(path: Path, n: int, edit: Any = None) -> None:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            case: dict[str, Any] = {"id": f"c{i}", "input": f"question {i} é", "assert": [{"type": "contains", "value": str(i)}]}
            if i % 7 == 0:
                case["category"] = f"cat{i % 3}"
            if i % 11 == 0:
                case["targets"] = ["a"] if i % 2 else ["b"]
            if i % 13 == 0:
                case["repeat"] = 2
            if edit is not None:
                case = edit(i, case)
            f.write(json.dumps(case, ensure_ascii=False) + "\n")


def _load(root: Path) -> Any:
    return load_dataset({"id": "d", "path": "cases.jsonl"}, base_dir=root, digest=lambda case: case_digest(case, lambda v: v))


def _both(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """(one process, two processes): the table, or the error text."""

    def attempt() -> Any:
        try:
            return _load(root)
        except DatasetError as exc:
            return str(exc)

    monkeypatch.setattr(split, "PARALLEL_MIN_BYTES", 10**15)
    alone = attempt()
    monkeypatch.setattr(split, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(split, "PARALLEL_MIN_LINES", 1)
    assert split.halves(root / "cases.jsonl") is not None  # (else this test proves nothing)
    return alone, attempt()


def _same_tables(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for i in range(len(a)):
        assert a.case(i).__dict__ == b.case(i).__dict__
        assert (a.case_id(i), a.category(i), a.repeat(i), a.targets(i), a.graded(i), a.digest(i)) == (
            b.case_id(i),
            b.category(i),
            b.repeat(i),
            b.targets(i),
            b.graded(i),
            b.digest(i),
        )
    assert a.digest(0) is not None


@pytest.fixture(autouse=True)
def _no_threads(request: pytest.FixtureRequest) -> None:
    if threading.active_count() > 1 and request.node.name != "test_every_test_here_in_a_fresh_interpreter":
        pytest.skip("a thread is running (another test's server): the loader would not fork; run in a fresh interpreter below")


@pytest.mark.slow
def test_every_test_here_in_a_fresh_interpreter() -> None:
    """In a full test run other tests leave server threads behind, and the loader never forks with a thread running:
    the tests of this file then run here, in a fresh interpreter, and must all pass."""
    if threading.active_count() == 1:
        pytest.skip("no thread is running: the tests above ran in this interpreter")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not fresh_interpreter"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]


def test_two_processes_give_the_table_one_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cases.jsonl", 3 * BLOCK * 10 + 5)
    alone, halved = _both(tmp_path, monkeypatch)
    _same_tables(alone, halved)
    first, second = split.halves(tmp_path / "cases.jsonl")  # type: ignore[misc]
    assert (second.first_line - 1) % BLOCK == 0 and first.end == second.start


def test_a_problem_in_the_second_half_reads_as_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(i: int, case: dict[str, Any]) -> dict[str, Any]:
        if i == 1700:
            case["input"] = 5
        if i == 1800:
            case["asert"] = []
        return case

    _write(tmp_path / "cases.jsonl", 2000, broken)
    alone, halved = _both(tmp_path, monkeypatch)
    assert isinstance(alone, str) and "cases.jsonl:1701" in alone and "cases.jsonl:1801" in alone
    assert halved == alone


def test_an_id_in_both_halves_is_named_as_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cases.jsonl", 2000, lambda i, case: {**case, "id": "c3"} if i == 1900 else case)
    alone, halved = _both(tmp_path, monkeypatch)
    assert isinstance(alone, str) and "'c3' is used twice (first at cases.jsonl:4)" in alone
    assert halved == alone


def test_a_child_that_fails_leaves_the_reading_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cases.jsonl", 1000)
    real = split.in_child
    children: list[Any] = []

    def failing(work: Any) -> Any:
        def boom() -> Any:
            raise MemoryError("the child ran out")

        child = real(boom)
        children.append(child)
        return child

    monkeypatch.setattr("evalx.datasets.loader.in_child", failing)
    alone, halved = _both(tmp_path, monkeypatch)
    assert children and children[0] is not None  # a child was made, and failed
    _same_tables(alone, halved)


def test_small_files_and_threads_stay_in_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "cases.jsonl", 1000)
    assert split.halves(tmp_path / "cases.jsonl") is None  # under PARALLEL_MIN_LINES
    _write(tmp_path / "cases.jsonl", 2 * split.PARALLEL_MIN_LINES)  # a few hundred KB: enough lines to pay for the fork
    assert split.halves(tmp_path / "cases.jsonl") is not None
    _write(tmp_path / "cases.jsonl", 1000)
    monkeypatch.setattr(split, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(split, "PARALLEL_MIN_LINES", 1)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert split.halves(tmp_path / "cases.jsonl") is None  # a fork would copy only this thread
    finally:
        stop.set()
        thread.join()
    assert split.halves(tmp_path / "cases.jsonl") is not None


def test_blank_lines_put_the_halves_off_the_block_boundary_and_the_tables_still_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "cases.jsonl", 1500)
    lines = (tmp_path / "cases.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    for at in (900, 300, 10):  # blank and comment lines in the first half: it holds fewer cases than lines
        lines.insert(at, "\n" if at != 300 else "// a comment\n")
    (tmp_path / "cases.jsonl").write_text("".join(lines), encoding="utf-8")
    alone, halved = _both(tmp_path, monkeypatch)
    _same_tables(alone, halved)
    assert halved.case(1499).source == "cases.jsonl:1503"
