"""Plugins: the README's ``@assertion("polite")`` through the CLI, the ``plugins:`` key, the entry-point group, the public API."""

from __future__ import annotations

import json
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator
from results_file import read_cells

import evalx
from evalx.assertions import plugins, registry
from evalx.cli import main

#: the example of docs/assertions.md, as a user writes it
MY_CHECKS = '''
from evalx import AssertionContext, Verdict, assertion

@assertion("polite")
def polite(ctx: AssertionContext, *, words: list[str] | None = None) -> Verdict:
    """Output contains a courtesy word."""
    found = [w for w in (words or ["please", "thanks"]) if w in ctx.text.lower()]
    return Verdict.ok() if found else Verdict.no("no courtesy word")
'''

AGENT = """
def answer(question):
    return "Thanks for asking: 4" if "2+2" in question else "4"
"""

CONFIG = """\
version: 1
plugins: [my_checks.py]
targets:
  - {id: bot, type: python, callable: agent.py:answer}
datasets:
  - id: manners
    cases:
      - {id: kind, input: what is 2+2?, assert: [{type: polite}]}
      - {id: curt, input: sum of two and two, assert: [{type: polite, words: [please]}]}
"""


#: each test's plugins register into the registry of that test only (conftest.fresh_registry)
pytestmark = pytest.mark.usefixtures("fresh_registry")


def project(tmp_path: Path, config: str = CONFIG, checks: str = MY_CHECKS) -> Path:
    (tmp_path / "my_checks.py").write_text(checks)
    (tmp_path / "agent.py").write_text(AGENT)
    cfg = tmp_path / "evalconfig.yaml"
    cfg.write_text(config)
    return cfg


def test_the_readme_example_validates_runs_and_shows_in_schema_and_reports(tmp_path: Path) -> None:
    cfg = project(tmp_path)
    validated = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert validated.exit_code == 0, validated.output
    assert "2 cases" in validated.stdout

    schema_out = CliRunner().invoke(main, ["schema", "-c", str(cfg)])
    assert schema_out.exit_code == 0, schema_out.output
    schema = json.loads(schema_out.stdout)
    Draft202012Validator.check_schema(schema)
    assert "polite" in schema["$defs"]["assertion"]["properties"]["type"]["enum"]
    assert schema["$defs"]["assert_polite"]["properties"]["words"] == {"type": "array", "items": {"type": "string"}}
    assert schema["$defs"]["assert_polite"]["description"] == "Output contains a courtesy word."

    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 1, ran.output  # `curt` fails: no courtesy word
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = {r["case_id"]: r for r in read_cells(run_dir)}
    assert results["kind"]["status"] == "pass"
    assert results["curt"]["status"] == "fail"
    assert [(a["type"], a["passed"]) for a in results["kind"]["assertions"]] == [("polite", True)]
    assert [(a["type"], a["passed"], a["reason"]) for a in results["curt"]["assertions"]] == [("polite", False, "no courtesy word")]
    html = (run_dir / "report.html").read_text()
    assert "polite" in html and "no courtesy word" in html

    rerendered = CliRunner().invoke(main, ["report", str(run_dir)])
    assert rerendered.exit_code == 0, rerendered.output
    assert "no courtesy word" in (run_dir / "report.html").read_text()


def test_without_the_plugins_key_the_type_is_unknown(tmp_path: Path) -> None:
    cfg = project(tmp_path, CONFIG.replace("plugins: [my_checks.py]\n", ""))
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 2
    assert "unknown assertion type 'polite'" in result.stderr
    schema = json.loads(CliRunner().invoke(main, ["schema"]).stdout)
    assert "polite" not in schema["$defs"]["assertion"]["properties"]["type"]["enum"]


def test_the_schema_is_rebuilt_when_a_plugin_registers(tmp_path: Path) -> None:
    from evalx.config.schema import schema_json

    assert '"assert_polite"' not in schema_json()
    cfg = project(tmp_path)
    assert CliRunner().invoke(main, ["validate", "-c", str(cfg)]).exit_code == 0
    assert '"assert_polite"' in schema_json()


def test_a_plugin_used_by_a_config_level_assert_and_a_module_name_plugin(tmp_path: Path) -> None:
    pkg = tmp_path / "evalx_test_plugpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "checks.py").write_text(MY_CHECKS.replace('"polite"', '"courteous"'))
    config = (
        "plugins: [evalx_test_plugpkg.checks]\n"
        "targets: [{id: bot, type: python, callable: agent.py:answer}]\n"
        "datasets: [{id: d, cases: [{id: kind, input: what is 2+2?}]}]\n"
        "assert: [{type: courteous}]\n"
    )
    cfg = project(tmp_path, config)
    try:
        ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
        assert ran.exit_code == 0, ran.output
        assert str(tmp_path.resolve()) not in sys.path  # the config's folder was there only while the plugin imported
    finally:
        for name in ("evalx_test_plugpkg", "evalx_test_plugpkg.checks"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize(
    ("plugins_value", "error"),
    [
        ("my_checks.py", "evalconfig.yaml:2 plugins: must be a list of .py files or module names, not 'my_checks.py'"),
        ("[my_checks.py, 3]", "evalconfig.yaml:2 plugins[1]: must be a .py file or a module name (a string), not 3"),
        ("['']", "evalconfig.yaml:2 plugins[0]: must be a .py file or a module name (a string), not an empty string"),
        ("[nope.py]", "evalconfig.yaml:2 plugins[0]: plugin failed: cannot import 'nope.py': no file "),
        (
            "[no_such_plugin_module_xyz]",
            "evalconfig.yaml:2 plugins[0]: plugin failed: cannot import 'no_such_plugin_module_xyz': "
            "No module named 'no_such_plugin_module_xyz'",
        ),
        ("[broken.py]", "evalconfig.yaml:2 plugins[0]: plugin failed: importing 'broken.py' raised ZeroDivisionError: division by zero"),
        (
            "[steals.py]",
            "evalconfig.yaml:2 plugins[0]: plugin failed: importing 'steals.py' raised ValueError: assertion type 'contains' "
            "is already registered (by evalx.assertions.deterministic.contains)",
        ),
    ],
)
def test_a_bad_plugins_key_or_a_failing_plugin_is_one_error(tmp_path: Path, plugins_value: str, error: str) -> None:
    cfg = project(tmp_path, CONFIG.replace("plugins: [my_checks.py]", f"plugins: {plugins_value}"))
    (tmp_path / "broken.py").write_text("import evalx\nRATIO = 1 / 0\n")
    (tmp_path / "steals.py").write_text(MY_CHECKS.replace('"polite"', '"contains"'))
    for command in (["validate"], ["run", "-q"], ["schema"]):
        result = CliRunner().invoke(main, [*command, "-c", str(cfg)])
        assert result.exit_code == 2, (command, result.output)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and error in lines[0], (command, lines)
        assert "unknown assertion type" not in result.stderr and "Traceback" not in result.output


def test_a_plugin_file_also_imported_by_the_target_registers_once(tmp_path: Path) -> None:
    cfg = project(tmp_path)
    (tmp_path / "agent.py").write_text("import my_checks  # the user's own import of the plugin\n" + AGENT)
    try:
        ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
        assert ran.exit_code == 1, ran.output  # ran: `curt` fails, nothing was "registered twice"
    finally:
        sys.modules.pop("my_checks", None)


# ---------------------------------------------------------------------------- entry points


def _install_dist(site: Path, name: str, module: str, source: str) -> None:
    """A minimal installed distribution: a module and a dist-info with an evalx.plugins entry point."""
    (site / f"{module}.py").write_text(source)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[evalx.plugins]\n{name} = {module}\n")


def test_an_entry_point_plugin_is_loaded_before_the_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _install_dist(site, "evalx-test-manners", "evalx_test_manners", MY_CHECKS.replace('"polite"', '"well_mannered"'))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "evalx_test_manners", raising=False)
    plugins._entry_point_issues = None  # as in a fresh process: not looked up yet
    assert [ep.value for ep in entry_points(group="evalx.plugins")] == ["evalx_test_manners"]

    schema = json.loads(CliRunner().invoke(main, ["schema"]).stdout)
    assert "well_mannered" in schema["$defs"]["assertion"]["properties"]["type"]["enum"]
    (tmp_path / "proj").mkdir()
    cfg = project(tmp_path / "proj", CONFIG.replace("plugins: [my_checks.py]\n", "").replace("polite", "well_mannered"))
    ran = CliRunner().invoke(main, ["run", "-c", str(cfg), "-q"])
    assert ran.exit_code == 1, ran.output
    (run_dir,) = (cfg.parent / "runs").iterdir()
    assert '"well_mannered"' in (run_dir / "results.jsonl").read_text()


def test_a_broken_entry_point_is_one_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _install_dist(site, "evalx-test-broken", "evalx_test_broken_plugin", "raise ImportError('needs torch')\n")
    monkeypatch.syspath_prepend(str(site))
    plugins._entry_point_issues = None
    cfg = project(tmp_path)
    for command in (["validate", "-c", str(cfg)], ["schema"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2, result.output
        assert result.stderr == (
            "entry point 'evalx-test-broken' = 'evalx_test_broken_plugin' (group evalx.plugins): "
            "plugin failed to load: ImportError: needs torch\n"
        )


def test_entry_points_are_looked_up_once_and_only_when_a_distribution_declares_some(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    real = importlib.metadata.entry_points
    calls = []

    def counted(**params: str) -> object:
        calls.append(params)
        return real(**params)

    monkeypatch.setattr("importlib.metadata.entry_points", counted)
    plugins._entry_point_issues = None
    registry.check_entry_point_plugins()
    assert calls == []  # nothing installed declares evalx.plugins: importlib.metadata is not even imported for it

    site = tmp_path / "site"
    site.mkdir()
    _install_dist(site, "evalx-test-once", "evalx_test_once_plugin", MY_CHECKS.replace('"polite"', '"once_only"'))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "evalx_test_once_plugin", raising=False)
    plugins._entry_point_issues = None
    for _ in range(3):
        registry.check_entry_point_plugins()
        registry.registered()
    assert calls == [{"group": "evalx.plugins"}]
    assert "once_only" in registry.registered()


# ---------------------------------------------------------------------------- the public API


def test_public_api_is_pinned() -> None:
    assert evalx.__all__ == [
        "AssertionContext",
        "AssertionResult",
        "Case",
        "Cell",
        "CellResult",
        "ConfigError",
        "DatasetError",
        "EvalxError",
        "JudgeError",
        "RunResult",
        "TargetError",
        "TargetProtocolError",
        "TargetTimeout",
        "ToolCall",
        "Trajectory",
        "Usage",
        "Verdict",
        "__version__",
        "arun",
        "assertion",
        "load_config",
        "run",
    ]
    for name in evalx.__all__:
        assert getattr(evalx, name) is not None


def test_the_package_is_typed() -> None:
    assert (Path(evalx.__file__).parent / "py.typed").is_file()


def test_assertion_signature_is_checked_when_it_registers() -> None:
    with pytest.raises(TypeError, match="parameter 'words' must be keyword-only"):

        @evalx.assertion("evalx_test_positional")
        def positional(ctx: evalx.AssertionContext, words: list[str]) -> evalx.Verdict:
            return evalx.Verdict.ok()

    with pytest.raises(ValueError, match="already registered"):

        @evalx.assertion("contains")
        def contains(ctx: evalx.AssertionContext) -> evalx.Verdict:
            return evalx.Verdict.ok()


def test_docs_list_the_public_api() -> None:
    docs = Path(__file__).parents[2] / "docs"
    text = (docs / "plugins.md").read_text() + (docs / "python-api.md").read_text()  # plugin authors' API, running from Python
    for name in evalx.__all__:
        assert f"`{name}`" in text, name
    assert textwrap.dedent(MY_CHECKS).strip().splitlines()[2] in text  # the decorator example
