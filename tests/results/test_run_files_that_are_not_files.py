"""Run folders whose files are not regular files (issue 30, class 6): never a hang, never read, named in one line.

A stored run is made through the real CLI, then one of its files is swapped
for a FIFO (or a link to ``/dev/zero``) and ``evalx report``, ``compare``,
``runs``, ``run --resume`` and ``run --baseline`` are run on it in a
subprocess (a hang would end at the subprocess's timeout). A derived file
(``summary.json``, ``run.json`` where it only adds figures) is named in a
warning and read as missing; a file the answer depends on (``results.jsonl``,
``reviews.jsonl``: marks change verdicts) is an error, exit 2, one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from cli_project import evalx_each

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs FIFOs and /dev/zero")


def evalx(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (done,) = evalx_each(project, args)
    return done


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with one finished run (two cells, one review mark)."""
    root = tmp_path_factory.mktemp("stored")
    (root / "agent.py").write_text("def answer(q):\n    return 'hi ' + q\n")
    (root / "evalconfig.yaml").write_text(
        textwrap.dedent(
            """\
            version: 1
            name: files
            targets:
              - {id: echo, type: python, callable: agent.py:answer}
            datasets:
              - id: d
                cases:
                  - {id: a, input: x, assert: [{type: contains, value: hi}]}
                  - {id: b, input: y, assert: [{type: contains, value: nope}]}
            """
        )
    )
    done = evalx(root, "run", "-q")
    assert done.returncode == 1, done.stdout + done.stderr
    return root


@pytest.fixture
def project(stored: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the stored project and its run folder."""
    root = tmp_path / "p"
    shutil.copytree(stored, root)
    (run_dir,) = (root / "runs").iterdir()
    return root, run_dir


def swap_for_fifo(path: Path) -> None:
    if path.exists():
        path.unlink()
    os.mkfifo(path)


def refused(done: subprocess.CompletedProcess[str], name: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "not a regular file" in line]
    assert line.endswith(f"{name}: not a regular file (a FIFO)"), done.stderr


def test_a_fifo_summary_is_read_as_missing_with_a_warning_and_report_rebuilds_it(project: tuple[Path, Path]) -> None:
    root, run_dir = project
    swap_for_fifo(run_dir / "summary.json")
    done, listed = evalx_each(root, ["report", run_dir.name], ["runs"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "summary.json: not a regular file (a FIFO); read as missing" in done.stderr
    assert (run_dir / "summary.json").is_file()  # written again from the results, atomically: a regular file now
    assert listed.returncode == 0 and run_dir.name in listed.stdout, listed.stdout + listed.stderr


def test_a_fifo_summary_does_not_block_runs_or_compare(project: tuple[Path, Path]) -> None:
    root, run_dir = project
    swap_for_fifo(run_dir / "summary.json")
    done, compared = evalx_each(root, ["runs"], ["compare", run_dir.name, run_dir.name])
    assert done.returncode == 0 and run_dir.name in done.stdout, done.stdout + done.stderr
    assert "summary.json: not a regular file (a FIFO)" in done.stderr
    done = compared
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pass rate" in done.stdout


def test_a_fifo_reviews_file_is_an_error_not_a_hang_nor_ignored_marks(project: tuple[Path, Path]) -> None:
    root, run_dir = project
    swap_for_fifo(run_dir / "reviews.jsonl")
    for done in evalx_each(root, ["report", run_dir.name], ["compare", run_dir.name, run_dir.name]):
        refused(done, "reviews.jsonl")


@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_results_that_are_not_a_regular_file_are_refused_everywhere(project: tuple[Path, Path], how: str) -> None:
    root, run_dir = project
    results = run_dir / "results.jsonl"
    results.unlink()
    if how == "fifo":
        os.mkfifo(results)
    else:
        results.symlink_to("/dev/zero")
    what = "a FIFO" if how == "fifo" else "a character device"
    commands = (["report", run_dir.name], ["compare", run_dir.name, run_dir.name], ["run", "-q", "--resume", run_dir.name])
    for args, done in zip(commands, evalx_each(root, *commands), strict=True):
        assert done.returncode == 2, (args, done.stdout + done.stderr)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        assert f"results.jsonl: not a regular file ({what})" in done.stderr, (args, done.stderr)


def test_a_fifo_run_record_stops_a_resume_with_one_line(project: tuple[Path, Path]) -> None:
    root, run_dir = project
    swap_for_fifo(run_dir / "run.json")
    done, reported = evalx_each(root, ["run", "-q", "--resume", run_dir.name], ["report", run_dir.name])
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().endswith("run.json: not a regular file (a FIFO)"), done.stderr
    done = reported
    assert done.returncode == 0, done.stdout + done.stderr
    assert "run.json: not a regular file (a FIFO); read as missing" in done.stderr
