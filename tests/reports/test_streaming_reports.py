"""Reports written as streams (issue 9): same bytes as the in-memory way, in bounded memory.

- JUnit: the hand serializer writes what ElementTree + ET.indent would, and
  input in completion order (the in-memory sort) gives the same file as
  matrix order (the stream);
- HTML: the spooled payload is exactly ``embed_json`` of the whole payload,
  and non-contiguous cases are numbered right (the second pass);
- ``evalx run`` and ``evalx report`` write the same report files (one path,
  evalx.reports.render), and writing them takes no more memory for 10x the cells;
- the sync-callable runner keeps concurrency for blocking callables.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from evalx.reports import write_html, write_junit
from evalx.reports.html import embed_json

RUN_ID = "20261126-101500-a1b2c3"
HOSTILE = "\x1b[31mred\x1b[0m NUL\x00 <script>alert('x')</script> & \"quotes\" tab\t\r\nline é 🎉 \ud800 \u2028"


def _results(rng: random.Random, *, cases: int, targets: int, repeats: int) -> list[dict[str, Any]]:
    out = []
    for c in range(cases):
        for t in range(targets):
            for r in range(repeats):
                status = rng.choice(["pass", "pass", "fail", "error", "skipped"])
                passed = {"pass": True, "fail": False, "error": None, "skipped": None}[status]
                out.append(
                    {
                        "index": len(out),
                        "run_id": RUN_ID,
                        "target": f"t{t}" + (HOSTILE if t == 1 else ""),
                        "dataset": "d",
                        "case_id": f"c{c}" + (HOSTILE if c == 2 else ""),
                        "repeat": r,
                        "category": rng.choice(["a", HOSTILE, None]),
                        "status": status,
                        "score": 1.0 if passed else 0.0,
                        "latency_ms": rng.choice([None, 1.25, 37.5]),
                        "assertions": [
                            {
                                "type": "contains",
                                "name": rng.choice([None, HOSTILE]),
                                "passed": passed,
                                "score": 0.0,
                                "reason": rng.choice(["", HOSTILE, "x" * 1500]),
                                "weight": 1.0,
                            }
                        ],
                        "output": {
                            "text": rng.choice(["", "ok", HOSTILE, "y" * 12_000]),
                            "request": {"body": {"q": HOSTILE, "n": [1, 2.5]}},
                        },
                        "error": "ValueError: boom\nmore" if status == "error" else None,
                        "traceback": HOSTILE if status == "error" else None,
                        "input": {"q": HOSTILE},
                        "expected": HOSTILE,
                        "tags": ["x"],
                    }
                )
    return out


def _reindented(raw: bytes) -> bytes:
    """What ElementTree itself writes for the same tree."""
    root = ET.fromstring(raw)
    tree = ET.ElementTree(root)
    ET.indent(tree, space="  ")
    import io

    buf = io.BytesIO()
    tree.write(buf, encoding="utf-8", xml_declaration=True)
    return buf.getvalue() + b"\n"


@pytest.mark.parametrize("repeats", [1, 3])
def test_junit_stream_is_elementtree_byte_for_byte(tmp_path: Path, repeats: int) -> None:
    rng = random.Random(repeats)
    results = _results(rng, cases=8, targets=3, repeats=repeats)
    # an XML parser reads a CR in text back as LF: CR is left to the element test below
    results = json.loads(json.dumps(results).replace("\\r", ""))
    path = tmp_path / "junit.xml"
    write_junit(results, path, name="n" + HOSTILE, run_id=RUN_ID)
    raw = path.read_bytes()
    assert raw == _reindented(raw)
    shuffled = results[:]
    rng.shuffle(shuffled)  # completion order: the in-memory sort, same bytes
    write_junit(shuffled, tmp_path / "shuffled.xml", name="n" + HOSTILE, run_id=RUN_ID)
    assert (tmp_path / "shuffled.xml").read_bytes() == raw
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    write_junit(lines, tmp_path / "from_file.xml", name="n" + HOSTILE, run_id=RUN_ID)  # streamed from the file
    assert (tmp_path / "from_file.xml").read_bytes() == raw


def test_junit_spills_big_suites_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import evalx.reports.junit as junit

    results = _results(random.Random(5), cases=30, targets=2, repeats=1)
    write_junit(results, tmp_path / "memory.xml", name="n", run_id=RUN_ID)
    monkeypatch.setattr(junit, "SPOOL_BYTES", 100)  # every suite goes to a temporary file
    write_junit(results, tmp_path / "spilled.xml", name="n", run_id=RUN_ID)
    assert (tmp_path / "spilled.xml").read_bytes() == (tmp_path / "memory.xml").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.xml", "spilled.xml"]  # no temporary left behind


def _summary(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    from evalx.results.summary import SummaryBuilder

    builder = SummaryBuilder(RUN_ID, "n", "2026-11-26T10:15:00+00:00")
    for r in results:
        builder.add(r)
    return builder.finish("2026-11-26T10:16:00+00:00", 1.0)


def _payload(page: str) -> str:
    match = re.search(r'<script type="application/json" id="evalx-data">(.*?)</script>', page, re.S)
    assert match is not None
    return match.group(1)


def test_html_streamed_payload_is_embed_json_of_the_whole(tmp_path: Path) -> None:
    results = _results(random.Random(3), cases=6, targets=2, repeats=2)
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    write_html(lines, _summary(results), tmp_path / "report.html")
    data = _payload((tmp_path / "report.html").read_text(encoding="utf-8"))
    assert embed_json(json.loads(data)) == data  # the pieces were put together as one dumps would
    payload = json.loads(data)
    assert len(payload["cells"]) == len(results) and len(payload["cases"]) == 6
    assert "</script" not in data.lower() and "\u2028" not in data


def test_html_numbers_non_contiguous_cases_right(tmp_path: Path) -> None:
    results = _results(random.Random(4), cases=5, targets=2, repeats=1)
    random.Random(1).shuffle(results)  # a killed run's completion order: cases interleave
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in results), encoding="utf-8")
    write_html(lines, _summary(results), tmp_path / "report.html")
    payload = json.loads(_payload((tmp_path / "report.html").read_text(encoding="utf-8")))
    assert len(payload["cases"]) == 5
    for cell, result in zip(payload["cells"], results, strict=True):
        assert payload["cases"][cell["c"]]["id"].startswith(f"c{result['case_id'][1]}")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


AGENT = """
import threading
def answer(question):
    if question.endswith("3"):
        return "wrong"
    if question.endswith("5"):
        raise RuntimeError("boom")
    return "The answer is 4."
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    cases = "\n".join(json.dumps({"id": f"case-{i}", "input": f"q{i}", "category": f"k{i % 3}"}) for i in range(40))
    (tmp_path / "cases.jsonl").write_text(cases + "\n", encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent("""
        version: 1
        name: one-path
        defaults: {concurrency: 4, timeout_s: 10, retries: 0, repeat: 2}
        targets:
          - {id: one, type: python, callable: agent.py:answer}
          - {id: two, type: python, callable: agent.py:answer}
        datasets:
          - {id: d, path: cases.jsonl}
        assert:
          - {type: contains, value: "4"}
        output: {dir: runs}
    """),
        encoding="utf-8",
    )
    return config


def test_evalx_report_rewrites_what_evalx_run_wrote_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from evalx.cli import main

    config = _project(tmp_path)
    cli = CliRunner()
    monkeypatch.chdir(tmp_path)  # the config's output dir and the --junit/--html paths are relative
    first = cli.invoke(main, ["run", "-c", str(config), "-q"])
    assert first.exit_code == 1, first.output  # the project has failing and erroring cells
    (first_dir,) = (tmp_path / "runs").iterdir()
    # the second run compares itself with the first: the summary carries a baseline comparison too
    second = cli.invoke(main, ["run", "-c", str(config), "-q", "--baseline", "latest", "--junit", "out/j.xml", "--html", "out/r.html"])
    assert second.exit_code == 1, second.output
    (run_dir,) = set((tmp_path / "runs").iterdir()) - {first_dir}
    names = ("summary.json", "summary.txt", "junit.xml", "report.html")
    written = {name: (run_dir / name).read_bytes() for name in names}
    assert (tmp_path / "out/j.xml").read_bytes() == written["junit.xml"]
    assert (tmp_path / "out/r.html").read_bytes() == written["report.html"]
    assert b"baseline" in written["summary.json"]
    for name in names[1:]:  # summary.json stays: what only the run knew (duration, baseline...) is read back from it
        (run_dir / name).unlink()
    rerendered = cli.invoke(main, ["report", str(run_dir), "--junit", "again/j.xml"])
    assert rerendered.exit_code == 0, rerendered.output
    for name, content in written.items():
        assert (run_dir / name).read_bytes() == content, name
    assert (tmp_path / "again/j.xml").read_bytes() == written["junit.xml"]
    assert [p.name for p in run_dir.iterdir() if p.name.startswith(".")] == []  # no spool left behind


def _plain(i: int) -> dict[str, Any]:
    return {
        "index": i,
        "run_id": RUN_ID,
        "target": f"t{i % 2}",
        "dataset": "d",
        "case_id": f"case-{i // 2}",
        "repeat": 0,
        "category": f"k{i % 3}",
        "status": "pass" if i % 5 else "fail",
        "score": 1.0,
        "latency_ms": 10.5 + i % 7,
        "assertions": [{"type": "contains", "name": None, "passed": bool(i % 5), "score": 1.0, "reason": "contains '4'", "weight": 1.0}],
        "output": {"text": f"The answer is 4. ({i})"},
        "error": None,
        "input": {"q": f"question {i}"},
        "expected": None,
        "tags": [],
    }


@pytest.mark.slow
def test_writing_the_reports_holds_no_results_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    import evalx.reports.html as html
    import evalx.reports.junit as junit
    from evalx.reports.render import write_reports

    # spill the spools early: what is measured is what the writers hold, not their 4 MB buffers
    monkeypatch.setattr(junit, "SPOOL_BYTES", 64 * 1024)
    monkeypatch.setattr(html, "SPOOL_BYTES", 64 * 1024)
    peaks = []
    for cells in (3_000, 12_000):
        run_dir = tmp_path / str(cells)
        run_dir.mkdir()
        with open(run_dir / "results.jsonl", "w", encoding="utf-8") as f:  # matrix order, as a finished run stores it
            f.writelines(json.dumps(_plain(i)) + "\n" for i in range(cells))
        summary = _summary(_plain(i) for i in range(cells))
        tracemalloc.start()
        try:
            write_reports(run_dir, summary)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert len(ET.parse(run_dir / "junit.xml").getroot().findall(".//testcase")) == cells
    # holding the 9,000 more results would take > 10 MB; a hash per finished case (JUnit's and the
    # HTML's, side by side: both follow one read of the file), a latency per cell and the copy
    # buffers (fuller with more cells) take ~3 MB
    assert peaks[1] - peaks[0] < 9_000 * 400, peaks


def test_sync_runner_runs_blocking_calls_side_by_side_and_never_more() -> None:
    import asyncio

    from evalx.targets.threads import SyncRunner

    width = 4
    barrier = threading.Barrier(width, timeout=10)  # passes only when `width` calls run at once
    lock = threading.Lock()
    active = peak = 0

    def call(i: int) -> int:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            if i < width:
                barrier.wait()
            if i == 7:
                raise ValueError("seven")
            return i * 2
        finally:
            with lock:
                active -= 1

    async def main() -> list[Any]:
        runner = SyncRunner(width)
        try:
            return await asyncio.gather(*(runner.run(lambda i=i: call(i)) for i in range(12)), return_exceptions=True)
        finally:
            runner.close()

    out = asyncio.run(main())
    assert peak == width
    assert [o for i, o in enumerate(out) if i != 7] == [i * 2 for i in range(12) if i != 7]
    assert isinstance(out[7], ValueError)
