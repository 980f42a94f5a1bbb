"""Issue 30, class 1 (values from disk are data, read with care): a results.jsonl line whose `status`, `assertions` or
`latency_ms` holds another type (a run folder edited, or restored from an artifact) is counted as unreadable by the one
reader — `evalx report` warns and writes its reports, the viewer's pages answer — never an internal error or an HTTP 500."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from viewer_project import make_runs, with_client

from evalx.viewer.app import make_app


@pytest.mark.parametrize(
    ("key", "junk", "counted"),
    [
        ("status", {"x": "<b>"}, True),
        ("status", ["pass"], True),
        ("assertions", 7, True),
        ("assertions", True, True),
        ("latency_ms", 1e308, True),
        ("latency_ms", -1e300, True),
        # what readers take as it is (an unknown status is an error; they check what they use)
        ("status", "passed", False),
        ("assertions", ["not an object"], False),
        ("assertions", "edited by hand", False),
        ("latency_ms", -1, False),
        ("latency_ms", "slow", False),
    ],
)
def test_a_cell_whose_fields_have_other_types_is_counted_unreadable_never_a_crash(
    tmp_path: Path, key: str, junk: Any, counted: bool
) -> None:
    config, (run_dir,) = make_runs(tmp_path, "a")
    results = run_dir / "results.jsonl"
    lines = results.read_text().splitlines()
    damaged = 0
    for n, line in enumerate(lines):
        cell = json.loads(line)
        if "index" in cell and cell["index"] in (0, 1):  # two cells, so a sum of two latencies would overflow
            cell[key] = junk
            lines[n] = json.dumps(cell)
            damaged += 1
    results.write_text("\n".join(lines) + "\n")
    done = subprocess.run([sys.executable, "-m", "evalx", "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    if counted:
        assert f"{damaged} unreadable line" in done.stderr, done.stderr  # counted, and said
        assert len(summary["unreadable_lines"]) == damaged
    else:
        assert not summary.get("unreadable_lines"), done.stderr

    async def pages(client: TestClient[Any, Any]) -> None:
        for path in ("/", "/cases", f"/run/{run_dir.name}", f"/run/{run_dir.name}/review", "/case?target=bot&dataset=d&case=flip"):
            res = await client.get(path)
            assert res.status < 500, (path, await res.text())

    with_client(make_app(config.parent / "runs"), pages)
