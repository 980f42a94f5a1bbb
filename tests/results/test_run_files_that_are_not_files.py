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


# -- the surfaces that landed since: merge, the CI event file, a baseline folder, capture (issue 30, class 6, variants) --


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with both shards of one plan run (``--shard 1/2`` and ``2/2``)."""
    root = tmp_path_factory.mktemp("shards")
    (root / "agent.py").write_text("def answer(q):\n    return 'hi ' + q\n")
    (root / "evalconfig.yaml").write_text(
        "version: 1\nname: shards\ntargets:\n  - {id: echo, type: python, callable: agent.py:answer}\n"
        "datasets:\n  - id: d\n    cases:\n"
        "      - {id: a, input: x, assert: [{type: contains, value: hi}]}\n"
        "      - {id: b, input: y, assert: [{type: contains, value: hi}]}\n"
    )
    for done in evalx_each(root, ["run", "-q", "--shard", "1/2"], ["run", "-q", "--shard", "2/2"]):
        assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.mark.parametrize("name", ["run.json", "summary.json", "results.jsonl"])
@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_merge_never_reads_a_shard_file_that_is_not_a_regular_file(shards: Path, tmp_path: Path, name: str, how: str) -> None:
    root = tmp_path / "p"
    shutil.copytree(shards, root)
    first, second = sorted((root / "runs").iterdir())
    (second / name).unlink()
    if how == "fifo":
        os.mkfifo(second / name)
    else:
        (second / name).symlink_to("/dev/zero")
    what = "a FIFO" if how == "fifo" else "a character device"
    (done,) = evalx_each(root, ["merge", str(first), str(second), "-o", str(root / "merged")], timeout=60)
    assert "internal error" not in done.stderr and (done.returncode == 0 or "Traceback" not in done.stderr), done.stderr
    assert f"{name} is not a regular file ({what})" in done.stderr or f"{name}: not a regular file ({what})" in done.stderr, done.stderr
    if name == "summary.json":  # derived figures: named, read as missing, the merge made from the cells
        assert done.returncode == 0, done.stdout + done.stderr
        assert "read as missing" in done.stderr and (root / "merged" / "summary.json").is_file()
    else:
        assert done.returncode == 2, done.stdout + done.stderr
        assert not (root / "merged").exists()


@pytest.mark.parametrize("how", ["fifo", "dev-zero"])
def test_a_github_event_file_that_is_not_a_regular_file_is_named_never_read(
    project: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    root, run_dir = project
    event = tmp_path / "event.json"
    if how == "fifo":
        os.mkfifo(event)
    else:
        event.symlink_to("/dev/zero")
    for key, value in {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_TOKEN": "t0ken-for-the-test",
        "GITHUB_API_URL": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(key, value)
    (done,) = evalx_each(root, ["comment", "--post", "github", run_dir.name], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    what = "a FIFO" if how == "fifo" else "a character device"
    assert f"cannot read the GitHub event: {event}: not a regular file ({what})" in done.stderr, done.stderr
    assert "not a pull request" in done.stderr


def test_a_baseline_folder_whose_results_are_a_fifo_is_refused_not_skipped(project: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = project
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    os.mkfifo(baseline / "results.jsonl")
    done = evalx(root, "run", "-q", "--baseline", str(baseline))
    refused(done, "results.jsonl")


def test_capture_from_a_run_whose_results_are_a_fifo_names_the_file(project: tuple[Path, Path], tmp_path: Path) -> None:
    root, run_dir = project
    swap_for_fifo(run_dir / "results.jsonl")
    done = evalx(root, "capture", "-o", str(tmp_path / "out"), str(run_dir), "--case", "a")
    refused(done, "results.jsonl")
