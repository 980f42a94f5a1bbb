"""Where a new executor, report format, target kind or provider goes (docs/architecture.md): each list agrees with the others.

Adding one of these touches the files docs/architecture.md names; these tests fail, naming what is missing, when one of
the places that must agree was left out.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from evalx.cli import main
from evalx.config.schema import config_schema
from evalx.execution.executors import EXECUTORS, CellExecutor
from evalx.reports.writers import Outputs, ReportWriter, report_writers

ROOT = Path(__file__).resolve().parents[1]


def _option_choices(command: str, option: str) -> list[str]:
    cmd = main.commands[command]
    (param,) = [p for p in cmd.params if option in getattr(p, "opts", ())]
    return list(param.type.choices)  # type: ignore[attr-defined]


def test_every_executor_is_in_the_registry_the_schema_and_the_cli() -> None:
    kinds = config_schema()["properties"]["executor"]["properties"]["kind"]
    enum = [v for v in kinds.get("enum", []) or [x for alt in kinds.get("anyOf", []) for x in alt.get("enum", [])] if v is not None]
    assert sorted(EXECUTORS) == sorted(enum) == sorted(_option_choices("run", "--executor"))
    protocol = {name for name in vars(CellExecutor) if not name.startswith("_")}
    for make in EXECUTORS.values():
        executor = make()
        assert protocol <= set(dir(executor)) and inspect.iscoroutinefunction(executor.execute), make


def test_every_report_writer_streams_and_rebuilds(tmp_path: Path) -> None:
    summary = {"name": "n", "run_id": "r", "repeat_pass_rule": "majority"}
    writers = report_writers(
        tmp_path, summary, outputs=Outputs(junit=tmp_path / "x.xml", junit_flavor="extended", markdown=tmp_path / "s.md")
    )
    assert len(writers) == 4  # the run folder's junit.xml and report.html, a flavoured --junit, Markdown
    protocol = {name for name in vars(ReportWriter) if not name.startswith("_")}
    assert protocol == {"offer", "finish", "rebuild", "close"}
    for writer in writers:
        assert all(callable(getattr(writer, method, None)) for method in protocol), writer
        writer.close()


def test_every_target_kind_is_built_and_in_the_schema() -> None:
    from evalx.targets import build_target
    from evalx.targets.settings import TargetSettings

    kinds = set(config_schema()["$defs"]["target"]["properties"]["type"]["enum"])
    source = inspect.getsource(build_target)
    assert kinds, "the schema names no target kind"
    for kind in kinds:
        assert f'kind == "{kind}"' in source, f"build_target does not build {kind!r} targets"
    with pytest.raises(ValueError, match="unknown target type"):
        build_target({"id": "x", "type": "nothing"}, TargetSettings())


def test_every_shipped_provider_is_a_definition_that_loads() -> None:
    from evalx.targets.definitions import find_provider

    names = sorted(p.stem for p in (ROOT / "providers").glob("*.yaml"))
    assert names
    for name in names:
        assert find_provider(name).name == name
