"""A project written into a test's folder and `evalx run` on it through the real entry point (shared by the CLI tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner

from evalx.cli import main


def write_config(folder: Path, targets: str, datasets: str) -> Path:
    """``evalconfig.yaml`` of ``targets`` and ``datasets`` (YAML, dedented) in ``folder``."""
    config = folder / "evalconfig.yaml"
    config.write_text("version: 1\n" + textwrap.dedent(targets).strip("\n") + "\n" + textwrap.dedent(datasets), encoding="utf-8")
    return config


def run_cli(config: Path, *args: str) -> tuple[int, str, Path]:
    """``evalx run -c CONFIG ARGS``: its exit status, its output and the run's folder (never a traceback)."""
    result = CliRunner().invoke(main, ["run", "-c", str(config), *args])
    assert "Traceback" not in result.output, result.output
    runs = sorted((config.parent / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    return result.exit_code, result.output, runs[-1]


def invoke_here(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``evalx ARGS`` through click's runner in this process, in the current folder, ended as a process would end."""
    result = CliRunner().invoke(main, list(args), env=dict(env or {}))  # click strips ANSI unless told to colour, as on a pipe
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exc_info[1], SystemExit):  # exit 0 leaves exception None
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(*result.exc_info)[1:])
    return subprocess.CompletedProcess(["evalx", *args], result.exit_code, result.stdout, stderr)


def evalx(*args: str, cwd: Path | None = None, env: Mapping[str, str | None] | None = None) -> subprocess.CompletedProcess[str]:
    """``evalx ARGS`` through click's runner on :func:`evalx.cli.main`, in this process: as ``python -m evalx`` would end.

    Run in ``cwd`` with ``env`` set for the call (a None value unsets a variable); stdout is not a terminal, as in a
    pipe. An exception that escapes the command is in ``stderr`` as the traceback Python would print. For what needs
    a process of its own (signals, the stdout's encoding, a hang bounded by a timeout), run ``python -m evalx``.
    """
    here = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return invoke_here(args, env)
    finally:
        os.chdir(here)


def evalx_each(cwd: Path, *commands: Sequence[str], timeout: float = 120) -> list[subprocess.CompletedProcess[str]]:
    """Each of ``commands`` (``evalx ARGS``, in turn, in ``cwd``) in one process of their own, as :func:`evalx` runs one.

    For commands that could hang (a FIFO read): a hang fails at ``timeout`` instead of stopping the suite, and the
    commands share one interpreter's start-up.
    """
    script = (
        "import json, sys\n"
        "from cli_project import invoke_here\n"
        "done = [invoke_here(args) for args in json.loads(sys.argv[1])]\n"
        "sys.stdout.write(json.dumps([[d.returncode, d.stdout, d.stderr] for d in done]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.run(
        [sys.executable, "-c", script, json.dumps([list(c) for c in commands])],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    return [
        subprocess.CompletedProcess(["evalx", *c], code, out, err)
        for c, (code, out, err) in zip(commands, json.loads(child.stdout), strict=True)
    ]
