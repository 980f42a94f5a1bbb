"""The pytest plugin: ``pytest --evalx evalconfig.yaml`` makes each (target, case) a test item; -k, -m, --lf, --co work."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from results_file import read_cells

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

BOT = """
import os, threading

_lock = threading.Lock()

def answer(q, case):
    with _lock, open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as log:
        log.write(f"{case['id']}\\n")
    return q.upper() if "ok" in q else q
"""

TOGETHER_BOT = """
import threading

_six = threading.Barrier(6, timeout=60)

def answer(q):
    _six.wait()  # returns once six calls are under way at the same time; one at a time, the first gives up after 60 s
    return q.upper()
"""

CONFIG = """
version: 1
name: plugged
defaults: {concurrency: 8}
targets: [{id: bot, type: python, callable: bot.py:answer}]
datasets:
  - id: d
    cases:
      - {id: c1, input: ok one, tags: [quick], assert: [{type: contains, value: OK}]}
      - {id: c2, input: ok two, category: billing, assert: [{type: contains, value: OK}]}
      - {id: c3, input: bad three, tags: [quick, slow], assert: [{type: contains, value: OK}]}
      - {id: c4, input: ok four, repeat: 3, assert: [{type: contains, value: OK}]}
"""


def _installed() -> bool:
    return any(ep.value == "evalx.pytest_plugin" for ep in entry_points(group="pytest11"))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".py", bot=BOT)
    pytester.makefile(".yaml", evalconfig=CONFIG)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    plugin = [] if _installed() else ["-p", "evalx.pytest_plugin"]  # a checkout without `pip install -e .`
    return pytester.runpytest_subprocess(*plugin, *args)  # a fresh interpreter, as a user runs pytest


def calls(pytester: pytest.Pytester) -> list[str]:
    log = pytester.path / "calls.log"
    return sorted(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else []


def runs(pytester: pytest.Pytester) -> list[Path]:
    folder = pytester.path / "runs"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_the_plugin_is_declared_as_a_pytest11_entry_point() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\nevalx = "evalx.pytest_plugin"' in text


@pytest.mark.slow
def test_each_target_and_case_is_an_item_with_its_verdict(project: pytest.Pytester) -> None:
    result = run(project, "--evalx", "evalconfig.yaml")
    result.assert_outcomes(passed=3, failed=1)
    assert calls(project) == ["c1", "c2", "c3", "c4", "c4", "c4"]  # c4's three repeats are one item
    # the failure text is the verdict and the assertion's reason, not a traceback into evalx
    result.stdout.fnmatch_lines(
        [
            "*_ d/c3 [[]bot[]] _*",
            "fail: bot on d/c3",
            "contains: expected to contain 'OK' (case-sensitive), got 'bad three'",
            "FAILED evalconfig.yaml::d/c3[[]bot[]] - fail: bot on d/c3",
        ]
    )
    assert "Traceback" not in result.stdout.str() and "evalx/" not in result.stdout.str().split("FAILURES")[1].split("short test")[0]
    (run_dir,) = runs(project)
    assert json.loads((run_dir / "summary.json").read_text())["totals"]["cells"] == 6
    result.stdout.fnmatch_lines([f"evalx: evalconfig.yaml: 6 cells, results in {run_dir}"])


@pytest.mark.slow
def test_xdist_workers_share_one_run_of_the_cells(project: pytest.Pytester) -> None:
    """Issue 30: `-n 3` runs each cell once per session (one run folder, one call a cell), every item with its verdict."""
    pytest.importorskip("xdist")
    result = run(project, "--evalx", "evalconfig.yaml", "-n", "3")
    result.assert_outcomes(passed=3, failed=1)
    assert calls(project) == ["c1", "c2", "c3", "c4", "c4", "c4"]  # not three times over
    (run_dir,) = runs(project)
    assert json.loads((run_dir / "summary.json").read_text())["totals"]["cells"] == 6
    result.stdout.fnmatch_lines(["*fail: bot on d/c3*"])
    assert result.stdout.str().count(f"evalx: evalconfig.yaml: 6 cells, results in {run_dir}") == 1  # said once, by the controller
    (project.path / "calls.log").unlink()
    result = run(project, "--evalx", "evalconfig.yaml", "-n", "3", "-k", "c1 or c3")  # each worker selects the same
    result.assert_outcomes(passed=1, failed=1)  # (the workers deselect: the controller counts 2 items)
    assert calls(project) == ["c1", "c3"]
    assert len(runs(project)) == 2


@pytest.mark.slow
def test_a_later_xdist_session_runs_its_own_cells_even_with_the_same_testrunuid(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30: workers shared runs by xdist's ``testrunuid``, which ``--testrunuid X`` makes the same in every session:
    a second session read the first one's results (stale verdicts, no call). Each session runs its own cells, two
    configs each once, and leaves no record behind."""
    pytest.importorskip("xdist")
    project.makefile(".yaml", other=CONFIG.replace("name: plugged", "name: other").replace("id: d\n", "id: e\n"))
    temp = tmp_path / "temp"  # where the sessions record their runs: this test's own
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    args = ("--evalx", "evalconfig.yaml", "--evalx", "other.yaml", "-n", "3", "--testrunuid", "the-same")
    run(project, *args).assert_outcomes(passed=6, failed=2)
    assert calls(project) == sorted(["c1", "c2", "c3", "c4", "c4", "c4"] * 2)  # each config's cells once
    assert len(runs(project)) == 2
    (project.path / "calls.log").unlink()
    project.makefile(".py", bot=BOT.replace('return q.upper() if "ok" in q else q', "return q"))  # nothing passes now
    run(project, *args).assert_outcomes(failed=8)  # not the first session's verdicts
    assert calls(project) == sorted(["c1", "c2", "c3", "c4", "c4", "c4"] * 2)
    assert len(runs(project)) == 4
    assert list(temp.glob("evalx-xdist-*")) == []  # the controller removed its session's records and locks


@pytest.mark.slow
def test_k_runs_one_case(project: pytest.Pytester) -> None:
    result = run(project, "--evalx", "evalconfig.yaml", "-k", "c2")
    result.assert_outcomes(passed=1, deselected=3)
    assert calls(project) == ["c2"]
    (run_dir,) = runs(project)
    assert [c["case_id"] for c in read_cells(run_dir)] == ["c2"]


@pytest.mark.slow
def test_last_failed_reruns_only_the_failed_items(project: pytest.Pytester) -> None:
    run(project, "--evalx", "evalconfig.yaml").assert_outcomes(passed=3, failed=1)
    (project.path / "calls.log").unlink()
    result = run(project, "--evalx", "evalconfig.yaml", "--lf")
    result.assert_outcomes(failed=1, deselected=3)
    assert calls(project) == ["c3"]
    result.stdout.fnmatch_lines(["run-last-failure: rerun previous 1 failure*"])


@pytest.mark.slow
def test_the_matrix_runs_concurrently(pytester: pytest.Pytester) -> None:
    pytester.makefile(".py", bot=TOGETHER_BOT)
    cases = "\n".join(f"      - {{id: s{i}, input: ok {i}, assert: [{{type: contains, value: OK}}]}}" for i in range(6))
    pytester.makefile(
        ".yaml",
        evalconfig="version: 1\ndefaults: {concurrency: 6}\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        f"datasets:\n  - id: d\n    cases:\n{cases}\n",
    )
    run(pytester, "--evalx", "evalconfig.yaml").assert_outcomes(passed=6)  # all six calls were in flight at once


def test_collect_only_lists_the_items_and_runs_nothing(project: pytest.Pytester) -> None:
    result = run(project, "--evalx", "evalconfig.yaml", "--co", "-q")
    result.stdout.fnmatch_lines(
        [
            "evalconfig.yaml::d/c1[[]bot[]]",
            "evalconfig.yaml::d/c2[[]bot[]]",
            "evalconfig.yaml::d/c3[[]bot[]]",
            "evalconfig.yaml::d/c4[[]bot[]]",
            "4 tests collected*",
        ]
    )
    assert calls(project) == [] and runs(project) == []


@pytest.mark.slow
def test_marks_select_by_tag_and_category_and_eval(project: pytest.Pytester) -> None:
    result = run(project, "--evalx", "evalconfig.yaml", "--strict-markers", "-m", "evalx_tag(name='quick')")
    result.assert_outcomes(passed=1, failed=1)  # (the workers deselect: the controller counts 2 items)
    assert calls(project) == ["c1", "c3"]
    result = run(project, "--evalx", "evalconfig.yaml", "-m", "evalx_category(name='billing')")
    result.assert_outcomes(passed=1, deselected=3)
    project.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = run(project, "--evalx", "evalconfig.yaml", "-m", "not eval")
    result.assert_outcomes(passed=1, deselected=4)


@pytest.mark.slow
def test_x_stops_at_the_first_failing_item(project: pytest.Pytester) -> None:
    result = run(project, "--evalx", "evalconfig.yaml", "-x")
    result.assert_outcomes(passed=2, failed=1)


@pytest.mark.slow
def test_configs_from_the_ini(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nevalx_configs = evalconfig.yaml\n")
    run(project).assert_outcomes(passed=3, failed=1)


def test_inert_without_a_config(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = run(project)
    result.assert_outcomes(passed=1)
    assert calls(project) == [] and runs(project) == []


def test_a_bad_config_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makefile(".yaml", broken=textwrap.dedent("version: 1\ntargets: [{id: t, type: pyhton}]\ndatasets: []\n"))
    result = run(project, "--evalx", "broken.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evalx *broken.yaml: *broken.yaml:2 targets[[]0[]].type: unknown type 'pyhton'*"])


@pytest.mark.slow
def test_the_default_example_config_runs_one_case_with_k(pytester: pytest.Pytester) -> None:
    """The offline example at the repository's root: -k greeting runs that case on the two default targets, nothing else."""
    import shutil

    shutil.copy(ROOT / "evalconfig.yaml", pytester.path / "evalconfig.yaml")
    (pytester.path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "agents.py", pytester.path / "examples" / "agents.py")
    shutil.copytree(ROOT / "examples" / "datasets", pytester.path / "examples" / "datasets")
    shutil.copytree(ROOT / "examples" / "judge", pytester.path / "examples" / "judge")  # the config's offline judge
    result = run(pytester, "--evalx", "evalconfig.yaml", "-k", "greeting")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2 and outcomes["deselected"] > 10, outcomes
    (run_dir,) = runs(pytester)
    assert sorted((c["target"], c["case_id"]) for c in read_cells(run_dir)) == [
        ("support-bot", "greeting"),
        ("support-bot-v2", "greeting"),
    ]
