"""A project written into a test's folder and `evalx run` on it through the real entry point (shared by the CLI tests)."""

from __future__ import annotations

import textwrap
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
