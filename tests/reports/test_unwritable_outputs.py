"""Outputs that cannot or must not be written, and numbers that are not numbers: clear errors, never a lost input or run."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main


def _project(tmp_path: Path, cases: int = 3, extra: str = "") -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "t.py").write_text("def f(text):\n    return 'hello ' + text\n", encoding="utf-8")
    rows = "".join(f'- {{id: c{i}, input: "case {i} {"x" * 40}", assert: [{{type: contains, value: hello}}]}}\n' for i in range(cases))
    (tmp_path / "d.yaml").write_text(rows, encoding="utf-8")
    config = tmp_path / "evalconfig.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            version: 1
            targets:
              - {id: echo, type: python, callable: t.py:f}
            datasets:
              - {id: d, path: d.yaml}
            """
        )
        + extra,
        encoding="utf-8",
    )
    return config


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result.exit_code, result.output


def _run(config: Path, *args: str) -> Path:
    code, output = _cli("run", "-q", "-c", str(config), *args)
    assert code == 0, output
    (run_dir,) = (config.parent / "runs").iterdir()
    return run_dir


# -- an output path that is one of the command's inputs ------------------------------------------------


def test_report_never_overwrites_the_run_it_reads(tmp_path: Path) -> None:
    config = _project(tmp_path)
    run_dir = _run(config)
    before = {name: (run_dir / name).read_bytes() for name in ("results.jsonl", "summary.json", "config.yaml")}
    for option in ("--html", "--junit"):
        for name in before:
            code, output = _cli("report", str(run_dir), option, str(run_dir / name))
            assert code == 2, output
            assert f"{option} {run_dir / name}" in output and "reads" in output
    assert {name: (run_dir / name).read_bytes() for name in before} == before
    # another run's record is protected too, however it is named
    other = _run(_project(tmp_path / "other"))
    code, output = _cli("report", str(run_dir), "--html", str(other / "run.json"))
    assert code == 2 and "run.json" in output
    # the report itself is fine to name: nothing to copy
    code, output = _cli("report", str(run_dir), "--html", str(run_dir / "report.html"))
    assert code == 0, output
    assert output.count("report.html") == 1


def test_run_never_overwrites_its_config_dataset_or_code(tmp_path: Path) -> None:
    config = _project(tmp_path)
    for option, target in (("--junit", "d.yaml"), ("--html", "evalconfig.yaml"), ("--markdown", "t.py")):
        before = (tmp_path / target).read_bytes()
        code, output = _cli("run", "-q", "-c", str(config), option, str(tmp_path / target))
        assert code == 2, output
        assert option in output and target in output
        assert (tmp_path / target).read_bytes() == before
    assert not (tmp_path / "runs").exists()  # refused before anything ran
    code, output = _cli("run", "-q", "-c", str(config), "--junit", str(tmp_path / "r.out"), "--html", str(tmp_path / "r.out"))
    assert code == 2 and "--html and --junit both write" in output


# -- an output that cannot be written ------------------------------------------------------------------


def test_a_report_on_a_full_disk_names_the_file_and_exits_3(tmp_path: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    config = _project(tmp_path)
    for option in ("--junit", "--html", "--markdown"):
        code, output = _cli("run", "-q", "-c", str(config), option, "/dev/full")
        assert code == 3, output
        assert "cannot write /dev/full: No space left on device" in output
    for run_dir in (tmp_path / "runs").iterdir():  # the run itself is whole
        assert len(read_cells(run_dir)) == 3
        assert (run_dir / "summary.json").is_file()


def _limit_file_size(size: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # python ignores SIGXFSZ: writes past it fail with EFBIG


def test_a_disk_that_fills_mid_run_names_the_file_keeps_whole_lines_and_resumes(tmp_path: Path) -> None:
    config = _project(tmp_path, cases=200)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-q", "-c", str(config)],
        preexec_fn=lambda: _limit_file_size(20_000),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "results.jsonl: File too large" in proc.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    raw = (run_dir / "results.jsonl").read_bytes()
    assert raw.endswith(b"\n") and b"\x00" not in raw  # whole lines only: the failed one was cut off
    kept = [json.loads(line) for line in raw.splitlines()]
    assert 0 < len(kept) < 200
    code, output = _cli("run", "-q", "-c", str(config), "--resume", run_dir.name)
    assert code == 0, output
    assert "unreadable" not in output
    assert len(read_cells(run_dir)) == 200


# -- numbers that are not numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "extra", "expected"),
    [
        ("target", "", "evalconfig.yaml:4 targets[0].timeout_s: nan is not a finite number"),
        ("defaults", "defaults:\n  max_total_cost: .inf\n", "evalconfig.yaml:7 defaults.max_total_cost: inf is not a finite number"),
        ("dataset", "", "d.yaml:1 cases[0].assert[0].value: -inf is not a finite number"),
    ],
)
def test_nan_and_infinity_are_refused_wherever_a_number_goes(tmp_path: Path, where: str, extra: str, expected: str) -> None:
    config = _project(tmp_path, cases=1, extra=extra)
    if where == "target":
        config.write_text(config.read_text(encoding="utf-8").replace("callable: t.py:f}", "callable: t.py:f,\n     timeout_s: .nan}"))
    if where == "dataset":
        (tmp_path / "d.yaml").write_text("- {id: a, input: x, assert: [{type: max_latency_ms, value: -.inf}]}\n", encoding="utf-8")
    for command in ("validate", "run"):
        code, output = _cli(command, "-c", str(config))
        assert code == 2, output
        assert expected in output


# -- an open-files limit too low for the concurrency asked ---------------------------------------------


def _engine_project(tmp_path: Path, url: str, key: str) -> Path:
    config = tmp_path / "evalconfig.yaml"
    targets = "".join(f"  - {{id: e{i}, type: engine, url: '{url}', api_key: {key}, concurrency: 200, cache: false}}\n" for i in (1, 2))
    cases = ", ".join(f"{{id: c{i}, input: {{message: hello}}}}" for i in range(3))
    config.write_text(f"version: 1\ntargets:\n{targets}datasets: [{{id: d, cases: [{cases}]}}]\n", encoding="utf-8")
    return config


@pytest.mark.slow
@pytest.mark.parametrize(("soft", "hard", "warned"), [(40, 40, True), (40, 4096, False)])
def test_a_low_open_files_limit_is_raised_or_named_before_the_run(
    engine_server: object, tmp_path: Path, soft: int, hard: int, warned: bool
) -> None:
    from conftest import ENGINE_TEST_KEY

    config = _engine_project(tmp_path, engine_server.url, ENGINE_TEST_KEY)  # type: ignore[attr-defined]
    proc = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-q", "-c", str(config)],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if "open-files limit" in line]
    if warned:
        assert lines == [
            "evalx: warning: the open-files limit is 40 but up to 6 requests at once (e1, e2) need about 70: "
            "cells may fail with 'too many open files'; raise it (ulimit -n 70) or lower concurrency"
        ], proc.stderr
    else:  # raised to what the run needs: no warning, every cell answered
        assert lines == [] and proc.returncode == 0, proc.stderr
