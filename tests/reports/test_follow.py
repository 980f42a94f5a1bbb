"""A run of many cells has its junit.xml and report.html built beside it by a forked child (evalx.reports.follow).

Each run here is a real ``evalx run`` in a fresh interpreter (a fork is only made with no other thread running:
never inside this test process), driven by a few lines that record what the child wrote. Whatever it wrote, or if
it wrote nothing, the reports must be the bytes ``evalx report`` writes again from the results file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalx.reports import follow

#: the driver: ``python -c DRIVER WRITTEN_JSON PATCH evalx-args...``; PATCH: "none", "give_up" (the child gives up at
#: its first line), "kill" (the child is killed as soon as it is made) or "late" (it answers after the run stopped
#: waiting). Unless late, the run waits for the child however long it takes, and the child runs at the run's own
#: priority: what it writes does not depend on how busy the machine is.
DRIVER = """
import json, os, signal, sys, time
from evalx.reports import follow, writers
out, patch = sys.argv[1], sys.argv[2]
if patch == "late":
    follow.WAIT_S, follow.WAIT_CELL_S = 0.2, 0.0
    real_write = writers.Followed.finish
    def late(self, summary):
        time.sleep(30)
        return real_write(self, summary)
    writers.Followed.finish = late
else:
    follow.WAIT_S, follow.WAIT_AT_MOST_LEFT = 600.0, 1.0
    os.nice = lambda increment: 0
follow.spare_cpu = lambda: True
real_finish, real_start = follow.Follower.finish, follow.Follower.start.__func__
def finish(self, summary):
    written = real_finish(self, summary)
    open(out, "w").write(json.dumps(written))
    return written
def start(cls, *args, **kwargs):
    made = real_start(cls, *args, **kwargs)
    if made is not None and patch == "kill":
        os.kill(made.pid, signal.SIGKILL)
    return made
def give_up(self, raw):
    raise follow._GiveUp
follow.Follower.finish = finish
follow.Follower.start = classmethod(start)
if patch == "give_up":
    follow._Order.line = give_up
from evalx.cli import main
main(sys.argv[3:], prog_name="evalx")
"""


def _project(root: Path, cases: int) -> Path:
    (root / "agent.py").write_text(
        "def answer(question):\n    return 'The answer is 4.' if '1' not in question else 'no idea'\n\n"
        "def other(question):\n    return '4'\n",
        encoding="utf-8",
    )
    with (root / "cases.jsonl").open("w", encoding="utf-8") as f:
        for i in range(cases):
            f.write(
                json.dumps({"id": f"c{i}", "input": f"case {i}?", "category": f"k{i % 3}", "assert": [{"type": "contains", "value": "4"}]})
                + "\n"
            )
    (root / "evalconfig.yaml").write_text(
        """version: 1
name: follow
defaults: {concurrency: 8}
targets:
  - {id: a, type: python, callable: 'agent.py:answer'}
  - {id: b, type: python, callable: 'agent.py:other'}
datasets:
  - {id: d, path: cases.jsonl}
output: {dir: runs}
""",
        encoding="utf-8",
    )
    return root


def _run(root: Path, *args: str, patch: str = "none") -> tuple[int, list[str] | None, Path]:
    """``evalx run ARGS`` in a fresh interpreter: its exit status, what the child wrote (None: no child), its folder."""
    written = root / "written.json"
    written.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(written), patch, "run", "-q", *args], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (run_dir,) = sorted((root / "runs").iterdir())[-1:]
    return done.returncode, json.loads(written.read_text()) if written.exists() else None, run_dir


def _as_the_file_gives(root: Path, run_dir: Path, *args: str) -> None:
    """The run's reports are what ``evalx report`` writes from its results file."""
    before = {name: (run_dir / name).read_bytes() for name in ("junit.xml", "report.html")}
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "report", str(run_dir), *args], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    for name, data in before.items():
        assert (run_dir / name).read_bytes() == data, name


@pytest.mark.slow
def test_a_run_of_many_cells_gets_from_its_follower_the_reports_its_file_gives(tmp_path: Path) -> None:
    root = _project(tmp_path, 1500)  # two targets: 3,000 cells, some failing
    status, written, run_dir = _run(root)
    assert status == 1
    assert written == ["report.html", "junit.xml"]
    _as_the_file_gives(root, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["totals"]["cells"] == 3000 and 0 < summary["totals"]["fail"] < 1500


@pytest.mark.slow
@pytest.mark.parametrize("patch", ["give_up", "kill", "late"])
def test_a_follower_that_gives_up_dies_or_is_late_leaves_the_reports_to_the_file(tmp_path: Path, patch: str) -> None:
    root = _project(tmp_path, 1500)
    status, written, run_dir = _run(root, patch=patch)
    assert status == 1
    assert written == []
    _as_the_file_gives(root, run_dir)
    assert not list(run_dir.glob(".*.tmp"))  # nothing a late child was writing is left behind


@pytest.mark.slow
def test_a_stopped_run_and_a_sampled_page(tmp_path: Path) -> None:
    root = _project(tmp_path, 1500)
    # --max-failures: the cells after the stop never come; the child offers what came, in order
    status, written, run_dir = _run(root, "--max-failures", "5")
    assert status == 1
    assert written == ["report.html", "junit.xml"]
    _as_the_file_gives(root, run_dir)
    # more cells than report.html embeds: its page is sampled from the run's totals, and both reports come from the file
    status, written, run_dir = _run(root, "--html-max-cells", "100")
    assert status == 1 and written is None
    _as_the_file_gives(root, run_dir, "--html-max-cells", "100")


def test_a_small_run_has_no_follower(tmp_path: Path) -> None:
    root = _project(tmp_path, follow.MIN_CELLS // 2 - 1)  # two targets: fewer cells than MIN_CELLS
    status, written, run_dir = _run(root)
    assert status == 1 and written is None
    assert (run_dir / "junit.xml").is_file() and (run_dir / "report.html").is_file()


def test_no_cpu_is_spare_while_every_one_is_busy() -> None:
    """The follower is made only with a CPU idle as the cells start: with a burner on every CPU, none is."""
    from evalx.common.forking import cpus, spare_cpu

    if not Path("/proc/loadavg").exists():
        pytest.skip("no /proc/loadavg here")
    spin = "import sys; print('spinning', flush=True)\nwhile True: pass"
    burners = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True) for _ in range(cpus())]
    try:
        for burner in burners:  # each past its start (reading files, it may wait on the disk): from now on always runnable
            assert burner.stdout is not None and burner.stdout.readline() == "spinning\n"
        seen = [spare_cpu() for _ in range(20)]  # (each a snapshot: a burner is runnable even while another runs)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert not any(seen)
