"""``${VAR}`` read as the number or boolean the schema wants, and hints for other tools' spellings (issue 17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from results_file import read_cells

from evalx.cli import main
from evalx.config.coercion import schema_types_at
from evalx.config.loader import load_config
from evalx.config.schema import config_schema

AGENT = "def answer(question):\n    return 'Paris is the capital'\n"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # messages name files relative to the working directory
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evalconfig.yaml"
    path.write_text(text, encoding="utf-8")
    return path


CONFIG = """\
version: 1
defaults:
  concurrency: ${J:-8}
  cache: ${C:-false}
  timeout_s: ${T:-1.5}
  max_total_cost: ${COST:-2}
targets:
  - id: bot
    type: python
    callable: agent.py:answer
    retries: ${R:-0}
datasets:
  - id: d
    cases:
      - {id: a, input: x, threshold: "${TH:-1}", assert: [{type: contains, value: Paris, weight: "${W:-2}"}]}
gates:
  min_pass_rate: ${MIN_PASS:-0.5}
  no_new_failures: ${STRICT:-no}
"""


def test_interpolated_numbers_and_booleans_take_the_schema_type(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, CONFIG), env={"J": "3", "C": "TRUE", "R": " 2 "})
    assert config.data["defaults"] == {"concurrency": 3, "cache": True, "timeout_s": 1.5, "max_total_cost": 2}
    assert config.data["targets"][0]["retries"] == 2
    case = config.data["datasets"][0]["cases"][0]
    assert case["threshold"] == 1 and case["assert"][0]["weight"] == 2  # an inline case and an assertion's own parameter
    assert config.data["gates"] == {"min_pass_rate": 0.5, "no_new_failures": False}


def test_an_interpolated_word_the_schema_names_stays_a_word(tmp_path: Path) -> None:
    """``concurrency`` takes a number or ``auto``: ``${J:-auto}`` gives the word, ``${J}=3`` the number."""
    assert load_config(write_config(tmp_path, CONFIG.replace("${J:-8}", "${J:-auto}")), env={}).data["defaults"]["concurrency"] == "auto"
    assert load_config(write_config(tmp_path, CONFIG.replace("${J:-8}", "${J:-auto}")), env={"J": "3"}).data["defaults"]["concurrency"] == 3


def test_a_run_uses_an_env_supplied_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, CONFIG)
    monkeypatch.setenv("J", "2")
    for command in ("validate", "run"):
        result = CliRunner().invoke(main, [command, "-c", str(path)])
        assert result.exit_code == 0, result.output
    (cell,) = read_cells(next((tmp_path / "runs").iterdir()))
    assert cell["status"] == "pass"
    saved = next((tmp_path / "runs").iterdir()).joinpath("config.yaml").read_text(encoding="utf-8")
    assert "  concurrency: 2\n  cache: false\n  timeout_s: 1.5\n" in saved  # the resolved config keeps the typed values


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"J": "many"}, "evalconfig.yaml:3 defaults.concurrency: '${J:-8}' gave 'many', not an integer"),
        ({"J": "2.5"}, "evalconfig.yaml:3 defaults.concurrency: '${J:-8}' gave '2.5', not an integer"),
        ({"C": "maybe"}, "evalconfig.yaml:4 defaults.cache: '${C:-false}' gave 'maybe', not a boolean (true or false)"),
        ({"T": "nan"}, "evalconfig.yaml:5 defaults.timeout_s: '${T:-1.5}' gave 'nan', not a number"),
        ({"W": "heavy"}, "evalconfig.yaml:15 datasets[0].cases[0].assert[0].weight: '${W:-2}' gave 'heavy', not a number"),
        ({"MIN_PASS": "most"}, "evalconfig.yaml:17 gates.min_pass_rate: '${MIN_PASS:-0.5}' gave 'most', not a number"),
    ],
)
def test_a_value_that_is_not_one_is_one_line_naming_file_line_and_key(tmp_path: Path, env: dict[str, str], message: str) -> None:
    path = write_config(tmp_path, CONFIG)
    for command in ("validate", "run"):
        result = CliRunner().invoke(main, [command, "-c", str(path)], env=env)
        assert result.exit_code == 2, result.output
        assert result.output.splitlines() == [message], result.output  # the schema's "is not of type" is not said as well
    assert not (tmp_path / "runs").exists()


def test_only_interpolated_values_are_coerced(tmp_path: Path) -> None:
    text = CONFIG.replace("concurrency: ${J:-8}", "concurrency: '8'").replace("retries: ${R:-0}", "retries: $${R}")
    result = CliRunner().invoke(main, ["validate", "-c", str(write_config(tmp_path, text))])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "evalconfig.yaml:3 defaults.concurrency: '8' is not an integer of at least 1 or 'auto' or a mapping of min, start, max",
        "evalconfig.yaml:11 targets[0].retries: '${R}' is not of type 'integer'",  # $${ is a literal, not interpolation
    ]


def test_strings_stay_strings_where_the_schema_wants_text(tmp_path: Path) -> None:
    text = CONFIG.replace("callable: agent.py:answer", "callable: agent.py:answer\n    description: ${N:-42}")
    text = text.replace("- {id: a, input: x,", "- {id: '${ID:-7}', input: '${IN:-12}',")
    config = load_config(write_config(tmp_path, text), env={})
    assert config.data["targets"][0]["description"] == "42"
    assert config.data["datasets"][0]["cases"][0]["id"] == "7" and config.data["datasets"][0]["cases"][0]["input"] == "12"


def test_an_unset_variable_in_a_number_is_reported_as_unset_only_where_it_runs(tmp_path: Path) -> None:
    text = CONFIG.replace("retries: ${R:-0}", "retries: ${R}")
    text = text.replace("targets:\n", "targets:\n  - {id: other, type: python, callable: agent.py:answer}\n", 1)
    path = write_config(tmp_path, text)
    result = CliRunner().invoke(main, ["validate", "-c", str(path)])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "evalconfig.yaml:12 targets[1].retries: environment variable R is not set (use ${R:-default} for a default)"
    ]
    result = CliRunner().invoke(main, ["run", "-c", str(path), "--target", "other"])
    assert result.exit_code == 0, result.output  # the target that uses R does not run: its retries keep their default


def test_schema_types_follow_refs_and_type_dispatch() -> None:
    schema = config_schema()
    data: dict[str, Any] = {
        "targets": [{"id": "a", "type": "engine", "url": "u", "max_events": "5"}, {"id": "b", "type": "python", "callable": "m:f"}],
        "assert": [{"type": "contains", "value": "x", "weight": "1"}],
    }
    assert schema_types_at(schema, data, ("targets", 0, "max_events")) == {"integer"}
    assert schema_types_at(schema, data, ("targets", 1, "max_events")) == set()  # not a python target's key
    assert schema_types_at(schema, data, ("assert", 0, "weight")) == {"number"}
    assert "string" in schema_types_at(schema, data, ("targets", 0, "url"))


# ---------------------------------------------------------------------------- hints


HINTED = """\
version: 1
targets:
  - id: gpt
    type: openai
    model: gpt-4o-mini
  - id: bot
    type: pythn
    callable: agent.py:answer
assert:
  - contains: Paris
  - llm_judge: {rubric: is it polite?}
  - {equals: "4"}
datasets:
  - id: d
    path: cases.jsonl
"""


def test_another_tools_spellings_get_what_to_write_instead(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "input": "x"}\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(write_config(tmp_path, HINTED))])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "evalconfig.yaml:4 targets[0].type: unknown type 'openai'; 'openai' is a provider: write type: provider, provider: openai",
        "evalconfig.yaml:7 targets[1].type: unknown type 'pythn' (did you mean 'python'?)",
        "evalconfig.yaml:10 assert[0].type: 'type' is a required property (did you mean {type: contains, value: Paris}?)",
        "evalconfig.yaml:11 assert[1].type: 'type' is a required property (did you mean {type: llm_judge, rubric: \"is it polite?\"}?)",
        "evalconfig.yaml:12 assert[2].type: 'type' is a required property (did you mean {type: equals, value: \"4\"}?)",
    ]


def test_a_dataset_file_assertion_gets_the_hint_too(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text('{"id": "a", "input": "x", "assert": [{"icontains": "paris"}, {"nope": 1}]}\n', encoding="utf-8")
    text = "version: 1\ntargets: [{id: bot, type: python, callable: agent.py:answer}]\ndatasets: [{id: d, path: cases.jsonl}]\n"
    result = CliRunner().invoke(main, ["validate", "-c", str(write_config(tmp_path, text))])
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        "cases.jsonl:1 cases[0].assert[0]: 'type' is a required property (did you mean {type: icontains, value: paris}?)",
        "cases.jsonl:1 cases[0].assert[1]: 'type' is a required property",  # not an assertion type: nothing to suggest
    ]
