"""Config loading and validation: every invalid config names FILE:LINE key.path and exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalx.cli import main
from evalx.common.documents import load_yaml
from evalx.config.loader import load_config
from evalx.config.schema import schema_json
from evalx.errors import ConfigError

HERE = Path(__file__).parents[1]  # tests/
INVALID = sorted((HERE / "configs" / "invalid").glob("*.yaml"))
VALID = sorted((HERE / "configs" / "valid").glob("*.yaml"))


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_config_exact_message(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.parent)
    monkeypatch.delenv("EVALX_TEST_UNSET_KEY", raising=False)
    result = CliRunner().invoke(main, ["validate", "-c", path.name])
    expected = path.with_suffix(".expected").read_text()
    assert result.exit_code == 2, result.output
    assert result.stderr == expected
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_config(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(path.parent)
    result = CliRunner().invoke(main, ["validate", "-c", path.name])
    assert result.exit_code == 0, result.output
    assert ": ok" in result.stdout


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: 1\n"
        "targets:\n"
        "  - {id: a, type: pythn}\n"
        "  - {id: a, type: python, callable: x:y}\n"
        "datasets:\n"
        "  - {id: d, cases: [{id: c, input: q, expectd: 1}]}\n"
        "extra: 1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    text = [str(i) for i in info.value.issues]
    assert any(":3 targets[0].type: unknown type 'pythn'" in t for t in text)
    assert any(":4 targets[1].id: duplicate target id 'a'" in t for t in text)
    assert any(":6 datasets[0].cases[0].expectd: unknown key" in t for t in text)
    assert any(":7 extra: unknown key 'extra'" in t for t in text)
    assert [i.line for i in info.value.issues] == sorted(i.line or 0 for i in info.value.issues)


def test_env_interpolation_and_defaults() -> None:
    loaded = load_yaml("a: ${X}\nb: ${Y:-dflt}\nc: $${X}\nd: pre-${X}-post\n", "f.yaml", env={"X": "1"})
    assert loaded.data == {"a": "1", "b": "dflt", "c": "${X}", "d": "pre-1-post"}
    assert loaded.missing_env == []


def test_unset_env_only_counts_for_targets_that_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    (tmp_path / "agent.py").write_text("def answer(q):\n    return q\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: 1\n"
        "targets:\n"
        "  - {id: bot, type: python, callable: agent.py:answer}\n"
        "  - {id: eng, type: engine, url: 'http://127.0.0.1:1', api_key: '${NOPE_KEY}'}\n"
        "datasets:\n"
        "  - {id: d, cases: [{id: c, input: q, assert: [{type: completed}]}]}\n"
    )
    config = load_config(cfg)
    config.check_env(["bot"])  # the engine does not run: its key is not needed
    with pytest.raises(ConfigError, match=r"c.yaml:4 targets\[1\].api_key: environment variable NOPE_KEY is not set"):
        config.check_env(["bot", "eng"])
    result = CliRunner().invoke(main, ["run", "-c", str(cfg), "--target", "bot", "-q"])
    assert result.exit_code == 0, result.output


def test_missing_config_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["validate", "-c", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "config file not found" in result.stderr


def test_committed_schema_matches_code() -> None:
    committed = (HERE.parent / "schemas" / "evalconfig.schema.json").read_text()
    assert committed == schema_json(), "run `evalx schema > schemas/evalconfig.schema.json`"


def test_schema_command_prints_valid_json_schema() -> None:
    from jsonschema import Draft202012Validator

    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    Draft202012Validator.check_schema(schema)
    assert "assert_numeric_close" in schema["$defs"]


def test_paths_are_relative_to_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = tmp_path / "sub"
    (sub / "data").mkdir(parents=True)
    (sub / "bot.py").write_text("def answer(q):\n    return 'hello ' + q\n")
    (sub / "data" / "cases.jsonl").write_text('{"id": "a", "input": "x", "assert": [{"type": "contains", "value": "hello"}]}\n')
    (sub / "evalconfig.yaml").write_text(
        "version: 1\ntargets: [{id: bot, type: python, callable: bot.py:answer}]\n"
        "datasets: [{id: d, path: data/cases.jsonl}]\noutput: {dir: out}\n"
    )
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "-c", "sub/evalconfig.yaml", "-q"])
    assert result.exit_code == 0, result.output
    assert len(list((sub / "out").iterdir())) == 1


def test_config_errors_never_quote_a_secret(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: 1\n"
        "targets:\n"
        "  - {id: e, type: engine, url: 'http://127.0.0.1:1', api_key: '${SECRET_TOKEN}', headers: {X-Trace: ['${SECRET_TOKEN}']}}\n"
        "datasets: [{id: d, cases: [{id: c, input: q, assert: [{type: completed}]}]}]\n"
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)], env={"SECRET_TOKEN": "tok-abcdef123456"})
    assert result.exit_code == 2
    assert "targets[0].headers.X-Trace" in result.stderr
    assert "tok-abcdef123456" not in result.output


def test_validate_reports_config_and_dataset_errors_in_one_pass(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": "a", "input": "x", "assert": [{"type": "completed"}]}\n{"id": "b" "input": "y"}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: 1\n"
        "targets: [{id: p, type: python, callable: nope.py:f}]\n"
        "datasets: [{id: d, path: d.jsonl}, {id: e, path: missing.jsonl}]\n"
    )
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert any("c.yaml:2 targets[0].callable: cannot import 'nope.py': no file " in line for line in lines)
    assert "d.jsonl:2: invalid JSON: Expecting ',' delimiter (column 12)" in lines
    assert any(line.endswith("datasets[1].path: missing dataset file missing.jsonl") for line in lines)
