"""CI guard against gross speed regressions: small versions of bench/run.py's throughput benchmarks.

2,000 provider cells through ``evalx run`` (a whole process, every output
written) against the bare aiohttp loop (bench/bare_loop.py, also a whole
process) on the same fake server in the same test, concurrency 50: once with
every case asserting the same thing, once with each case its own ``contains``
value (bench/run.py's ``provider_distinct``: the fake server echoes something
of each case, so every distinct spec is validated, evaluated and passes). It
fails only when evalx falls below 0.15x the bare loop — a ratio measured in
this run, never an absolute time (the full benchmarks' target is 0.4x; see
bench/RESULTS.md). Deselect with ``-m "not bench"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from fake_server import FakeServer  # noqa: E402

pytestmark = [pytest.mark.bench, pytest.mark.slow]

CELLS = 2_000
CONCURRENCY = 50
MIN_RATIO = 0.15


def _wall(cmd: list[str], cwd: Path | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "EVALX_"))}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return time.perf_counter() - t0, proc


def _project(tmp_path: Path, url: str, *, distinct: bool = False) -> Path:
    with open(tmp_path / "cases.jsonl", "w", encoding="utf-8") as f:
        for i in range(CELLS):
            # distinct: what the echoing fake server puts in its answer to this case only
            check = {"type": "contains", "value": f"Reference: case {i}."} if distinct else {"type": "contains", "value": "4"}
            f.write(json.dumps({"id": f"c{i}", "input": f"What is 2 + 2? (case {i})", "assert": [check]}) + "\n")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        f"""version: 1
name: bench-guard
defaults: {{concurrency: {CONCURRENCY}, timeout_s: 60, retries: 0}}
targets:
  - {{id: model, type: provider, provider: openai, model: bench-model, base_url: '{url}/v1'}}
datasets:
  - {{id: bench, path: cases.jsonl}}
""",
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize("distinct", [False, True], ids=["one-spec", "distinct-specs"])
def test_evalx_keeps_up_with_a_bare_aiohttp_loop(tmp_path: Path, distinct: bool) -> None:
    with FakeServer(echo=distinct) as server:
        config = _project(tmp_path, server.url, distinct=distinct)
        bare_cmd = [
            sys.executable,
            str(BENCH / "bare_loop.py"),
            "--url",
            server.url,
            "--kind",
            "provider",
            "-n",
            str(CELLS),
            "-c",
            str(CONCURRENCY),
        ]
        _wall(bare_cmd)  # warm the server and the OS caches up
        bare_s, bare = _wall(bare_cmd)
        assert bare.returncode == 0, bare.stderr
        assert json.loads(bare.stdout)["failures"] == 0
        evalx_s, run = _wall([sys.executable, "-m", "evalx", "run", "-c", str(config), "--no-cache", "-q"], cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["totals"]["pass"] == CELLS  # the work was really done, every output written
    for name in ("results.jsonl", "summary.txt", "junit.xml", "report.html"):
        assert (run_dir / name).is_file()
    ratio = (CELLS / evalx_s) / (CELLS / bare_s)
    assert ratio >= MIN_RATIO, (
        f"evalx ran {CELLS / evalx_s:.0f} cells/s, the bare aiohttp loop {CELLS / bare_s:.0f} req/s: "
        f"ratio {ratio:.2f} < {MIN_RATIO} — a gross speed regression (profile with bench/run.py)"
    )
