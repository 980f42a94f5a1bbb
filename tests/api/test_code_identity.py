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


def _cli_run(folder: Path) -> list[dict[str, Any]]:
    """``evalx run`` in a process of its own (as a user runs it again after an edit): the new run's cells."""
    done = subprocess.run(
        [sys.executable, "-m", "evalx", "run", "-c", str(folder / "evalconfig.yaml"), "-q"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode in (0, 1), done.stderr
    return _cells(max((folder / "runs").iterdir(), key=lambda p: p.stat().st_mtime_ns))


@pytest.mark.slow
def test_an_edited_helper_module_judge_or_conversation_is_never_replayed_from_the_cache(tmp_path: Path) -> None:
    """The digest followed only the target's own file: an edited helper module or imported constant, an edited Python
    judge, and an edited agent in a scripted conversation (each turn's key) replayed the old answers as cached."""
    (tmp_path / "helpers.py").write_text("def letter():\n    return 'A'\n")
    (tmp_path / "prompts.py").write_text("SUFFIX = 'x'\n")
    (tmp_path / "agent.py").write_text(
        "import prompts\nfrom helpers import letter\n\ndef answer(q):\n    return letter() + ' ' + str(q) + prompts.SUFFIX\n"
    )
    (tmp_path / "judge.py").write_text("import json\n\ndef grade(prompt, **kw):\n    return json.dumps({'pass': True, 'reason': 'A'})\n")
    config = _config("agent.py:answer", "A", cache=True)
    config["targets"].append({"id": "judge", "type": "python", "callable": "judge.py:grade"})
    config["judge"] = {"target": "judge"}
    config["defaults"]["targets"] = ["t"]
    config["datasets"][0]["cases"] = [
        {"id": "judged", "input": "q", "assert": [{"type": "llm_judge", "rubric": "fine"}]},
        {"id": "talk", "turns": [{"input": "one"}, {"input": "two"}], "assert": [{"type": "completed"}]},
    ]
    (tmp_path / "evalconfig.yaml").write_text(yaml.safe_dump(config))

    def seen(cells: list[dict[str, Any]]) -> tuple[set[str], list[str], bool]:
        texts = {_text(c)[0] for c in cells} | {t["output"]["text"][0] for c in cells for t in c.get("turns") or []}
        reasons = [a["reason"] for c in cells for a in c["assertions"] if a["type"] == "llm_judge"]
        return texts, reasons, any(_cached(c) for c in cells)

    first, again = _cli_run(tmp_path), _cli_run(tmp_path)
    assert seen(first) == ({"A"}, ["A"], False) and seen(again) == ({"A"}, ["A"], True)  # unchanged code: cached
    (tmp_path / "helpers.py").write_text("def letter():\n    return 'B'\n")
    assert seen(_cli_run(tmp_path)) == ({"B"}, ["A"], False)  # the judge's verdict too: it grades a new output
    assert seen(_cli_run(tmp_path))[2]  # (cached again)
    (tmp_path / "prompts.py").write_text("SUFFIX = 'y'\n")
    assert {_text(c)[-1] for c in _cli_run(tmp_path) if c["case_id"] == "judged"} == {"y"}
    (tmp_path / "judge.py").write_text("import json\n\ndef grade(prompt, **kw):\n    return json.dumps({'pass': False, 'reason': 'C'})\n")
    assert seen(_cli_run(tmp_path))[1] == ["C"]  # the answers are cached; the edited judge's verdict is not


@pytest.mark.slow
def test_an_objects_state_and_a_notebooks_globals_are_part_of_its_code(tmp_path: Path) -> None:
    """``Agent("A").answer`` and ``Agent("B").answer`` (two processes: the same name) and a function reading a global
    that a notebook changed had one digest: the second replayed the first's answers as cached."""
    script = textwrap.dedent(f"""
        import sys
        import evalx

        class Agent:
            def __init__(self, letter):
                self.letter = letter
                self.memo = {{}}  # what changes in place (a memo, a counter) is not part of the digest

            def answer(self, q):
                self.memo[q] = LETTER
                return f"{{self.letter}}{{LETTER}} {{q}}"

        LETTER = sys.argv[2]
        config = {_config("placeholder", "", cache=True)!r}
        config["targets"][0]["callable"] = Agent(sys.argv[1]).answer
        result = evalx.run(evalx.load_config(config, base_dir={str(tmp_path)!r}))
        print("SEEN", sorted({{c.text.split()[0] for c in result.results()}}), sum(c.cached for c in result.results()))
    """)

    def run(letter: str, global_letter: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, letter, global_letter], capture_output=True, text=True, timeout=120)
        return next(line for line in done.stdout.splitlines() if line.startswith("SEEN")) if "SEEN" in done.stdout else done.stderr

    assert run("A", "1") == "SEEN ['A1'] 0"
    assert run("A", "1") == "SEEN ['A1'] 10"  # the same object state and globals: cached
    assert run("B", "1") == "SEEN ['B1'] 0"
    assert run("B", "2") == "SEEN ['B2'] 0"


def test_a_name_given_to_an_object_never_takes_an_importable_name_from_another_config(tmp_path: Path) -> None:
    """A function given as an object whose ``module:qualname`` is a real, importable function (a redefinition, a
    wrapper) took that name: a concurrent run whose config named the importable function called the object instead."""
    (tmp_path / "agentmod.py").write_text("def answer(q):\n    return 'A ' + q\n")

    def imposter(q: str) -> str:
        return f"B {q}"

    imposter.__module__, imposter.__qualname__ = "agentmod", "answer"
    named = evalx.load_config(_config("agentmod:answer", "A"), base_dir=tmp_path)  # imports agentmod

    async def both() -> list[evalx.RunResult]:
        given = evalx.load_config(_config(imposter, "B"), base_dir=tmp_path)
        return list(await asyncio.gather(evalx.arun(named, no_cache=True), evalx.arun(given, no_cache=True)))

    a, b = asyncio.run(both())
    assert (a.summary["totals"]["pass"], b.summary["totals"]["pass"]) == (10, 10), (a.summary["totals"], b.summary["totals"])
    assert yaml.safe_load((b.run_dir / "config.yaml").read_text())["targets"][0]["callable"] == "agentmod:answer_2"


def _cells(run_dir: Path) -> list[dict[str, Any]]:
    from results_file import read_cells

    return read_cells(run_dir)


def _cached(cell: Any) -> bool:
    return bool(cell["cached"] if isinstance(cell, dict) else cell.cached)


def _text(cell: Any) -> str:
    return str(cell["output"]["text"] if isinstance(cell, dict) else cell.text)


def test_two_projects_naming_the_same_module_never_call_each_others_function(tmp_path: Path) -> None:
    """Two configs in two folders, each with its own agent.py, both naming ``agent:answer`` in one process (the Python
    API, or pytest with two --evalx configs): the second ran the first project's function. It is refused, naming both
    files; by file (``agent.py:answer``) each runs its own, concurrently."""
    script = textwrap.dedent("""
        import asyncio, sys
        import evalx

        def config(ref, letter):
            cases = [{"id": f"c{i}", "input": "q", "assert": [{"type": "contains", "value": letter}]} for i in range(3)]
            return {"version": 1, "name": "p", "targets": [{"id": "t", "type": "python", "callable": ref}],
                    "datasets": [{"id": "d", "cases": cases}]}

        first = evalx.run(evalx.load_config(config("agent:answer", "A"), base_dir=sys.argv[1]))
        print("FIRST", first.summary["totals"]["pass"])
        try:
            evalx.load_config(config("agent:answer", "B"), base_dir=sys.argv[2])
        except evalx.ConfigError as exc:
            print("REFUSED", exc)

        async def both():
            a = evalx.arun(evalx.load_config(config("agent.py:answer", "A"), base_dir=sys.argv[1]))
            b = evalx.arun(evalx.load_config(config("agent.py:answer", "B"), base_dir=sys.argv[2]))
            return await asyncio.gather(a, b)

        print("BY FILE", [r.summary["totals"]["pass"] for r in asyncio.run(both())])
    """)
    for name, letter in (("a", "A"), ("b", "B")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "agent.py").write_text(f"def answer(q):\n    return '{letter} ' + q\n")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert "FIRST 3" in done.stdout, done.stdout + done.stderr
    refused = next(line for line in done.stdout.splitlines() if line.startswith("REFUSED"))
    assert "targets[0].callable: cannot import 'agent'" in refused and "a module 'agent' is imported already" in refused, refused
    assert "name it by its file instead (agent.py:...)" in refused, refused
    assert "BY FILE [3, 3]" in done.stdout, done.stdout + done.stderr
