"""A Python target that answers without ever awaiting must not hold the event loop, or its results, for the whole run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from measured import run_measured
from results_file import read_cells

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves these out: they take the longest

AGENT = """
import os
from pathlib import Path

calls = 0


async def answer(q):
    global calls
    calls += 1
    if calls == 3000:  # by now the results of most earlier cells must be in the file (nothing awaited since the start)
        results = next(Path(os.environ["RUNS_DIR"]).glob("*/results.jsonl"))
        lines = results.read_bytes().count(b"\\n")
        return f"ok {q} lines={lines}"
    return f"ok {q}"
"""


def test_results_of_a_never_awaiting_async_target_are_written_as_it_runs(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    with (tmp_path / "cases.jsonl").open("w") as f:
        for i in range(4000):
            f.write(json.dumps({"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "ok"}]}) + "\n")
    (tmp_path / "evalconfig.yaml").write_text(
        "version: 1\nname: inline\ntargets: [{id: a, type: python, callable: agent.py:answer}]\ndatasets: [{id: d, path: cases.jsonl}]\n"
    )
    env = {**os.environ, "RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-m", "evalx", "run", "-q"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    cells = read_cells(run_dir)
    assert len(cells) == 4000
    seen = [c["output"]["text"] for c in cells if "lines=" in c["output"]["text"]]
    assert len(seen) == 1
    lines = int(seen[0].rsplit("=", 1)[1])
    assert lines >= 2000, seen  # written while the run went on (at most a few hundred held for one write)


def test_memory_of_a_never_awaiting_async_target_stays_flat(tmp_path: Path) -> None:
    """30,000 cells peak within 20 MB of 3,000 (results were held until the loop turned: ~700 bytes a cell more)."""
    peaks = []
    for n in (3000, 30000):
        root = tmp_path / str(n)
        root.mkdir()
        (root / "agent.py").write_text("async def answer(q):\n    return 'ok ' + q\n")
        with (root / "cases.jsonl").open("w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"c{i}", "input": f"q{i}", "assert": [{"type": "contains", "value": "ok"}]}) + "\n")
        (root / "evalconfig.yaml").write_text(
            "version: 1\nname: inline\ntargets: [{id: a, type: python, callable: agent.py:answer}]\n"
            "datasets: [{id: d, path: cases.jsonl}]\n"
        )
        done = run_measured([sys.executable, "-m", "evalx", "run", "-q"], root, timeout_s=300)
        assert done.peak_kib, done.stderr  # its own peak, not pytest's (tests/measured.py)
        peaks.append(done.peak_mb)
    # the cases themselves take ~450 bytes each (12.5 MB more at 30,000); held results added ~700 more (~31 MB)
    assert peaks[1] - peaks[0] < 20, peaks  # MB
