"""report.html's template is compiled once per evalx version and kept in the user's cache folder; a cache that is
damaged, unusable or turned off never changes or fails a report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = """
version: 1
name: cache
targets:
  - {id: bot, type: python, callable: bot.py:answer}
datasets:
  - id: d
    cases:
      - {id: one, input: hi}
assert:
  - {type: contains, value: hi}
output: {dir: runs}
"""


def _evalx(cwd: Path, *args: str, cache: Path | None, off: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("EVALX_TEMPLATE_CACHE", None)
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    if off:
        env["EVALX_TEMPLATE_CACHE"] = "0"
    return subprocess.run([sys.executable, "-m", "evalx", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("project")
    (project / "bot.py").write_text("def answer(q):\n    return q\n", encoding="utf-8")
    (project / "evalconfig.yaml").write_text(CONFIG, encoding="utf-8")
    done = _evalx(project, "run", "-q", cache=tmp_path_factory.mktemp("first-cache"))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = [p for p in (project / "runs").iterdir() if p.is_dir() and not p.is_symlink()]
    return run


def _page(run_dir: Path, cache: Path | None, off: bool = False) -> str:
    done = _evalx(run_dir.parent.parent, "report", str(run_dir), cache=cache, off=off)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    return (run_dir / "report.html").read_text(encoding="utf-8")


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("evalx/templates-*/*.cache"))


def test_the_template_is_compiled_once_and_the_page_is_the_same(run_dir: Path, tmp_path: Path) -> None:
    first = _page(run_dir, tmp_path)
    (entry,) = _entries(tmp_path)
    stamp = entry.stat().st_mtime_ns
    second = _page(run_dir, tmp_path)
    assert entry.stat().st_mtime_ns == stamp  # loaded, not written again
    uncached = _page(run_dir, tmp_path / "other", off=True)
    assert not (tmp_path / "other").exists()
    assert _strip_ids(first) == _strip_ids(second) == _strip_ids(uncached)


def test_a_damaged_entry_is_compiled_again(run_dir: Path, tmp_path: Path) -> None:
    good = _page(run_dir, tmp_path)
    (entry,) = _entries(tmp_path)
    for damage in (b"", b"j2garbage", entry.read_bytes()[:40]):
        entry.write_bytes(damage)
        assert _strip_ids(_page(run_dir, tmp_path)) == _strip_ids(good)


def test_a_cache_folder_that_cannot_be_used_changes_nothing(run_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    good = _page(run_dir, tmp_path / "fine")
    assert _strip_ids(_page(run_dir, blocker)) == _strip_ids(good)


def _strip_ids(page: str) -> str:
    """The page less what differs between two renders of one run (the data marker is random)."""
    import re

    return re.sub(r"evalx-data-[0-9a-f]{32}", "", page)
