"""One resolver of user code: ``file.py:Class.method``, one import a file, sys.path only while user code runs."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.common.usercode import UserCodeError, import_user_module, resolve_callable, user_code_on_path

AGENT = """
import pathlib

# counts the imports of this file: evalx must import it once, whoever names it
with open(pathlib.Path(__file__).with_name("imports.log"), "a") as log:
    log.write(__name__ + "\\n")


class Agent:
    greeting = "hello"

    @staticmethod
    def answer(question):
        return "4" if "2+2" in question else "no idea"

    @classmethod
    def greet(cls, question):
        return cls.greeting

    def bound(self, question):  # an instance method: evalx has no Agent to call it on
        return "never"


class Checks:
    @classmethod
    def has_four(cls, output, ctx):
        return "4" in output

    @staticmethod
    def short(output, ctx):
        return len(output) < 20


def plain(question):
    return question
"""


def project(tmp_path: Path, *, target: str, assertion: str, case_assert: str = "", global_assert: str = "") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    cfg = tmp_path / "evalconfig.yaml"
    cfg.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            targets:
              - {{id: bot, type: python, callable: "{target}"}}
            datasets:
              - id: d
                cases:
                  - id: four
                    input: what is 2+2?
                    assert:
                      - {{type: python, callable: "{assertion}"}}
                      {case_assert}
            """
        )
        + (f'assert:\n  - {{type: python, callable: "{global_assert}"}}\n' if global_assert else "")
    )
    return cfg


def results_of(tmp_path: Path) -> list[dict]:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return read_cells(run_dir)


def test_static_and_class_methods_validate_and_run(tmp_path: Path) -> None:
    cfg = project(
        tmp_path,
        target="agent.py:Agent.answer",
        assertion="agent.py:Checks.has_four",
        case_assert='- {type: python, callable: "agent.py:Checks.short"}',
    )
    validated = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert validated.exit_code == 0, validated.output
    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 0, ran.output
    (result,) = results_of(tmp_path)
    assert result["status"] == "pass"
    assert result["output"]["text"] == "4"
    assert [a["passed"] for a in result["assertions"]] == [True, True]


def test_a_classmethod_target_gets_its_class(tmp_path: Path) -> None:
    cfg = project(tmp_path, target="agent.py:Agent.greet", assertion="agent.py:Checks.short")
    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 0, ran.output
    assert results_of(tmp_path)[0]["output"]["text"] == "hello"


@pytest.mark.parametrize("where", ["target", "case", "global"])
def test_an_instance_method_fails_validate_saying_so(tmp_path: Path, where: str) -> None:
    bad = "agent.py:Agent.bound"
    cfg = project(
        tmp_path,
        target=bad if where == "target" else "agent.py:Agent.answer",
        assertion=bad if where == "case" else "agent.py:Checks.has_four",
        global_assert=bad if where == "global" else "",
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 2, result.output
    line = {"target": 3, "case": 10, "global": 13}[where]
    key = {"target": "targets[0].callable", "case": "datasets[0].cases[0].assert[0].callable", "global": "assert[0].callable"}[where]
    message = (
        "'agent.py:Agent.bound' is an instance method of class Agent: evalx has no Agent instance to call it on; "
        "make it a @staticmethod or @classmethod, or a module-level function"
    )
    assert result.stderr.endswith(f"evalconfig.yaml:{line} {key}: {message}\n"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 2 and "instance method of class Agent" in ran.stderr


def test_a_file_used_by_a_target_and_an_assertion_is_imported_once(tmp_path: Path) -> None:
    cfg = project(tmp_path, target="agent.py:Agent.answer", assertion="agent.py:Checks.has_four", global_assert="./agent.py:Checks.short")
    assert CliRunner().invoke(main, ["validate", "-c", str(cfg)]).exit_code == 0
    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 0, ran.output
    names = (tmp_path / "imports.log").read_text().splitlines()
    assert len(names) == 1, names  # validate, the target and both assertions (however the path is spelled) share it
    assert names[0].startswith("_evalx_user_agent_")


def test_the_module_name_is_stable_and_derived_from_the_path(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for sub in ("a", "b"):
        (tmp_path / sub / "checks.py").write_text(f"WHERE = {sub!r}\ndef f(x):\n    return WHERE\n")
    fa, fb = resolve_callable("checks.py:f", tmp_path / "a"), resolve_callable("a/../b/checks.py:f", tmp_path)
    assert (fa(0), fb(0)) == ("a", "b")  # two files of one name stay two modules
    assert fb is resolve_callable("checks.py:f", tmp_path / "b")  # the same file, however it is spelled
    assert fa.__module__ != fb.__module__ and fa.__module__.startswith("_evalx_user_checks_")
    assert sys.modules[fa.__module__].__file__ == str((tmp_path / "a" / "checks.py").resolve())


def test_sys_path_holds_the_config_folder_only_while_user_code_runs(tmp_path: Path) -> None:
    (tmp_path / "helper_for_lazy_import.py").write_text("VALUE = 'lazy ok'\n")
    (tmp_path / "agent.py").write_text(
        "def answer(question):\n"
        "    import helper_for_lazy_import  # imported while the cell runs\n"
        "    return helper_for_lazy_import.VALUE\n"
    )
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "mine.py").write_text("def ok(output, ctx):\n    return 'lazy ok' in output\n")
    cfg = tmp_path / "evalconfig.yaml"
    cfg.write_text(
        "targets: [{id: bot, type: python, callable: agent.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: a, input: q, assert: [{type: python, callable: checks/mine.py:ok}]}]}]\n"
    )
    before = list(sys.path)
    try:
        assert CliRunner().invoke(main, ["validate", "-c", str(cfg)]).exit_code == 0
        assert sys.path == before
        ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
        assert ran.exit_code == 0, ran.output
        assert results_of(tmp_path)[0]["output"]["text"] == "lazy ok"
        assert sys.path == before  # nothing left behind, and the file's own folder (checks/) was never added
    finally:
        sys.modules.pop("helper_for_lazy_import", None)


def test_user_code_on_path_nests_and_keeps_an_entry_that_was_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    entry = str(tmp_path.resolve())
    with user_code_on_path(tmp_path):
        with user_code_on_path(tmp_path):
            assert sys.path.count(entry) == 1 and sys.path[0] == entry
        assert entry in sys.path
    assert entry not in sys.path
    sys.path.append(entry)  # the user's own: left alone
    with user_code_on_path(tmp_path):
        pass
    assert sys.path[-1] == entry


def test_errors_say_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("class C:\n    class Inner:\n        @staticmethod\n        def f(x):\n            return x\nX = 3\n")
    (tmp_path / "boom.py").write_text("raise RuntimeError('no network here')\n")
    assert resolve_callable("m.py:C.Inner.f", tmp_path)(5) == 5
    cases = {
        "m.py": "must look like module:function or path/to/file.py:function",
        "m.py:nope": "module 'm.py' has no attribute 'nope'",
        "m.py:C.nope": "'C' in 'm.py' has no attribute 'nope'",
        "m.py:X": "'m.py:X' is not callable (it is int)",
        "missing.py:f": "cannot import 'missing.py': no file ",
        "no_such_module_xyz:f": "cannot import 'no_such_module_xyz': No module named 'no_such_module_xyz'",
        "boom.py:f": "importing 'boom.py' raised RuntimeError: no network here",
    }
    for ref, message in cases.items():
        with pytest.raises(UserCodeError) as info:
            resolve_callable(ref, tmp_path)
        assert message in str(info.value), (ref, str(info.value))
    assert isinstance(UserCodeError("x"), ImportError)  # callers that catch ImportError keep working


def test_a_module_form_and_a_file_form_share_the_module(tmp_path: Path) -> None:
    (tmp_path / "evalx_test_shared_mod.py").write_text("def f(x):\n    return x\n")
    try:
        by_name = import_user_module("evalx_test_shared_mod", tmp_path)
        assert import_user_module("evalx_test_shared_mod.py", tmp_path) is by_name
    finally:
        sys.modules.pop("evalx_test_shared_mod", None)
