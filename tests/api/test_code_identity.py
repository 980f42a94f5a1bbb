"""Issue 30, code identity: a Python target is its function object within a process, and its code in cache keys."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import evalx


def _config(answer: Callable[..., Any] | str, letter: str, *, cache: bool = False) -> dict[str, Any]:
    """Cases that check ``letter`` (two concurrent runs), or the same cases whatever the letter (the cache key's case part)."""
    check = {"type": "contains", "value": "q" if cache else letter}
    cases = [{"id": f"c{i}", "input": f"q{i}", "assert": [check]} for i in range(10)]
    return {
        "version": 1,
        "name": "run",
        "defaults": {"cache": cache},
        "targets": [{"id": "t", "type": "python", "callable": answer}],
        "datasets": [{"id": "d", "cases": cases}],
    }


def test_two_lambdas_in_two_concurrent_runs_each_call_their_own(tmp_path: Path) -> None:
    async def both() -> list[evalx.RunResult]:
        first = evalx.arun(_config(lambda q: f"A {q}", "A"), output_dir=tmp_path / "a", no_cache=True)
        second = evalx.arun(_config(lambda q: f"B {q}", "B"), output_dir=tmp_path / "b", no_cache=True)
        return list(await asyncio.gather(first, second))

    a, b = asyncio.run(both())
    assert (a.summary["totals"]["pass"], b.summary["totals"]["pass"]) == (10, 10), (a.summary["totals"], b.summary["totals"])
    names = [yaml.safe_load((r.run_dir / "config.yaml").read_text())["targets"][0]["callable"] for r in (a, b)]
    assert names[0] != names[1], names  # two objects, two names


def test_a_redefined_function_or_another_lambda_is_never_replayed_from_the_cache(tmp_path: Path) -> None:
    def answer(q: str) -> str:
        return f"A {q}"

    first = evalx.run(evalx.load_config(_config(answer, "A", cache=True), base_dir=tmp_path))
    again = evalx.run(evalx.load_config(_config(answer, "A", cache=True), base_dir=tmp_path))
    assert first.summary["totals"]["pass"] == 10 and all(c.cached for c in again.results())  # the same code: cached

    def answer(q: str) -> str:  # type: ignore[no-redef]  # a notebook cell run again with new code
        return f"B {q}"

    redefined = evalx.run(evalx.load_config(_config(answer, "B", cache=True), base_dir=tmp_path))
    assert not any(c.cached for c in redefined.results()) and {c.text[0] for c in redefined.results()} == {"B"}
    other = evalx.run(evalx.load_config(_config(lambda q: f"C {q}", "C", cache=True), base_dir=tmp_path))
    assert not any(c.cached for c in other.results()) and {c.text[0] for c in other.results()} == {"C"}


def test_an_edited_file_is_never_replayed_from_the_cache(tmp_path: Path) -> None:
    """Through the CLI, a process per run: agent.py's helper changes, the function named in the config does not."""
    (tmp_path / "agent.py").write_text("def helper(q):\n    return 'A ' + q\n\ndef answer(q):\n    return helper(q)\n")
    (tmp_path / "evalconfig.yaml").write_text(yaml.safe_dump(_config("agent.py:answer", "A", cache=True)))

    def run() -> list[dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "evalx", "run", "-c", str(tmp_path / "evalconfig.yaml"), "-q", "--json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stderr
        run_dir = max((tmp_path / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns)
        return _cells(run_dir)

    first, again = run(), run()
    assert not any(_cached(c) for c in first) and all(_cached(c) for c in again)
    (tmp_path / "agent.py").write_text("def helper(q):\n    return 'B ' + q\n\ndef answer(q):\n    return helper(q)\n")
    edited = run()
    assert not any(_cached(c) for c in edited)
    assert all(_text(c).startswith("B ") for c in edited)


def test_a_lambdas_name_with_no_function_behind_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(evalx.ConfigError) as caught:
        evalx.load_config(_config("__main__:_lambda_", "A"), base_dir=tmp_path)
    assert "no such function is at hand in this process" in str(caught.value)
    script = textwrap.dedent(f"""
        import evalx
        config = {_config("__main__:notebook._locals_._lambda_", "A")!r}
        try:
            evalx.load_config(config, base_dir={str(tmp_path)!r})
        except evalx.ConfigError as exc:
            print("REFUSED", exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "REFUSED" in done.stdout and "give the function itself" in done.stdout, done.stdout + done.stderr


def _cells(run_dir: Path) -> list[dict[str, Any]]:
    from results_file import read_cells

    return read_cells(run_dir)


def _cached(cell: Any) -> bool:
    return bool(cell["cached"] if isinstance(cell, dict) else cell.cached)


def _text(cell: Any) -> str:
    return str(cell["output"]["text"] if isinstance(cell, dict) else cell.text)
